"""PostgreSQL: a pipeline of statements sent on libpq's connection directly, one flush, one wait.

psycopg's own pipeline (``conn.pipeline()`` with a cursor) drives a Python generator and a
wait per statement, and its exit another two: at the two to four statements of a batch
transaction that is most of the client's CPU for it (measured, psycopg 3.3: about 160 µs per
``BEGIN`` + claim, rows + ``COMMIT`` against about 40 µs sent here). :func:`run` sends the same
statements on the connection's ``pgconn`` in pipeline mode, one ``Sync`` at the end (as
psycopg's pipeline does), and reads the results in one loop.

What the server sees is what a psycopg cursor sends:

* parameters are adapted by the connection's own ``Transformer`` (its dumpers, formats and
  type oids, so a value means what it means through a cursor), a list in the binary format a
  cursor would use for it with ``%b`` (its text form is escaped element by element);
* a statement with parameters is prepared once per connection and parameter types, and kept
  in psycopg's own cache of prepared statements (its ``_prepared`` manager, same key): so
  psycopg's ``DEALLOCATE ALL`` after a rollback, or its eviction of the least used one, drops
  ours from the cache as it drops them from the server, and the next use prepares again. A
  statement counts as prepared only once the server answered its ``Parse``. Without that
  manager (another psycopg), statements go unnamed: parsed and planned each time;
* a failed statement raises the error psycopg raises for it
  (``psycopg.errors.error_from_result``); the statements after it were skipped by the server
  up to the ``Sync``, as in psycopg's pipeline;
* a pipeline that fails part-way (a broken connection, an interrupt) closes the connection:
  its state is not known, so it is never used again.

:func:`usable` says whether :func:`run` takes the statements (``%s`` placeholders with
sequences, or ``%(name)s`` with mappings); the caller runs the others as before.
"""

from __future__ import annotations

import contextlib
import re
import select
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

Statements = Sequence[tuple[str, Sequence[Sequence[Any] | Mapping[str, Any]]]]


class _Conn:
    """Per DB-API connection: its Transformer (adapts parameters, loads rows) and psycopg's
    cache of prepared statements (None: none kept, statements go unnamed)."""

    __slots__ = ("names", "next_name", "prepared_max", "tx")

    def __init__(self, dbapi: Any) -> None:
        from psycopg.adapt import Transformer

        self.tx: Any = Transformer(dbapi)
        manager = getattr(dbapi, "_prepared", None)
        names = getattr(manager, "_names", None)
        if getattr(dbapi, "prepare_threshold", 5) is None:
            names = None  # the connection was told never to prepare (say, behind a pooler)
        self.names: Any = names if isinstance(names, OrderedDict) else None
        self.prepared_max = int(getattr(manager, "prepared_max", 0) or 0)
        self.next_name = 0


_conns: weakref.WeakKeyDictionary[Any, _Conn] = weakref.WeakKeyDictionary()
# SQL as written for psycopg -> its $n form and parameter names (None: not sent here)
_Query = tuple[bytes, tuple[str, ...] | None]
_queries: dict[str, _Query | None] = {}


def usable(statements: Statements) -> bool:
    """:func:`run` takes these: each SQL's placeholders are all ``%s`` with sequences of
    parameters or all ``%(name)s`` with mappings (``%%`` a percent sign)."""
    for sql, rows in statements:
        query = _query(sql)
        if query is None:
            return False
        named = query[1] is not None
        for row in rows:
            if row and isinstance(row, Mapping) != named:
                return False
    return True


def run(
    dbapi: Any, statements: Statements, *, rows_of: int = -1, whole_rows: bool = False
) -> list[Any]:
    """Send each statement once per parameter row, then a ``Sync``, in one flush; wait for every
    result. Returns the first column of every row statement ``rows_of`` returned (its last
    parameter row's; ``whole_rows``: the rows as tuples), ``[]`` when ``rows_of`` is -1. Raises
    the first failed statement's error as psycopg does; a broken connection raises psycopg's
    ``OperationalError``."""
    rows = run_rows(dbapi, statements, (rows_of,)).get(rows_of, [])
    return rows if whole_rows else [row[0] for row in rows]


def run_rows(
    dbapi: Any, statements: Statements, rows_of: Sequence[int]
) -> dict[int, list[tuple[Any, ...]]]:
    """:func:`run`, the rows (tuples) of each statement listed in ``rows_of`` by its index."""
    state = _conns.get(dbapi)
    if state is None:
        state = _conns[dbapi] = _Conn(dbapi)
    sends = _adapted(state.tx, statements)  # before anything is sent: a value that cannot be
    parses: dict[int, Any] = {}  # command position -> (cache key, name) of a Parse sent
    try:  # adapted leaves the connection as it was
        results = _exchange(dbapi.pgconn, state, sends, parses)
    except BaseException:
        # sent in part, or results unread: its state is not known, so it is not used again
        # (closed: SQLAlchemy takes the error as a disconnect and invalidates it)
        with contextlib.suppress(Exception):
            dbapi.close()
        raise
    return _outcome(dbapi, state, sends, results, parses, rows_of)


# per parameter row: (statement index, query, adapted params or None, types, formats)
_Send = tuple[int, bytes, Any, tuple[int, ...], list[Any]]


def _adapted(tx: Any, statements: Statements) -> list[_Send]:
    from psycopg.adapt import PyFormat

    # A list goes as a binary array: psycopg's AUTO picks its text form, which escapes every
    # element through a regular expression (measured: 534 µs for an outbox write's three bytea
    # arrays of two envelopes, 28 µs binary). An empty or all-NULL list, whose element type
    # cannot be told, psycopg still sends as text ('{}'), as AUTO would.
    auto, binary = PyFormat.AUTO, PyFormat.BINARY
    sends: list[_Send] = []
    for index, (sql, rows) in enumerate(statements):
        converted = _query(sql)
        assert converted is not None  # usable() said so
        query, names = converted
        for row in rows:
            if not row:
                sends.append((index, query, None, (), []))
                continue
            values = row if names is None else [row[n] for n in names]  # type: ignore[call-overload]
            formats = [binary if type(v) is list else auto for v in values]
            params = tx.dump_sequence(values, formats)
            sends.append((index, query, params, tuple(tx.types), list(tx.formats)))
    return sends


def _exchange(pgconn: Any, state: _Conn, sends: list[_Send], parses: dict[int, Any]) -> list[Any]:
    """Send ``sends`` in pipeline mode and a ``Sync``; the last result of each command sent
    (a ``Parse`` sent first for a statement not prepared yet: its position in ``parses``)."""
    names = state.names
    preparing: dict[Any, bytes] = {}
    n = 0
    pgconn.enter_pipeline_mode()
    for _, query, params, types, formats in sends:
        if params is None:
            pgconn.send_query_params(query, None)
            n += 1
            continue
        name = None
        if names is not None:
            key = (query, types)
            name = names.get(key) or preparing.get(key)
            if name is not None and key in names:
                names.move_to_end(key)  # used: the last psycopg evicts (least recently used)
            if name is None and len(names) + len(preparing) < state.prepared_max:
                name = preparing[key] = b"_fleet_%d" % state.next_name
                state.next_name += 1
                pgconn.send_prepare(name, query, param_types=types)
                parses[n] = (key, name)
                n += 1
        if name is not None:
            pgconn.send_query_prepared(name, params, param_formats=formats)
        else:
            pgconn.send_query_params(query, params, param_types=types, param_formats=formats)
        n += 1
    pgconn.pipeline_sync()
    _flush(pgconn)
    results = _results(pgconn, n)
    pgconn.exit_pipeline_mode()
    return results


def _outcome(
    dbapi: Any,
    state: _Conn,
    sends: list[_Send],
    results: list[Any],
    parses: dict[int, Any],
    rows_of: Sequence[int],
) -> dict[int, list[tuple[Any, ...]]]:
    from psycopg import pq
    from psycopg.errors import error_from_result

    error = None
    out: dict[int, list[tuple[Any, ...]]] = {}
    done = pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK
    statement = iter(sends)
    for i, res in enumerate(results):
        ok = res is not None and res.status in done
        if res is not None and res.status == pq.ExecStatus.FATAL_ERROR and error is None:
            error = error_from_result(res, encoding=dbapi.info.encoding)
        parse = parses.get(i)
        if parse is not None:  # a Parse's answer: prepared (kept in psycopg's cache) or not
            if ok and state.names is not None:
                state.names[parse[0]] = parse[1]
            continue
        index = next(statement)[0]
        if ok and index in rows_of:
            tx = state.tx
            tx.set_pgresult(res)
            out[index] = tx.load_rows(0, res.ntuples, tuple)
    if error is not None:
        raise error
    return out


_PLACEHOLDER = re.compile(r"%(?:\((\w+)\)s|(s)|(%)|(.?))", re.DOTALL)


def _query(sql: str) -> _Query | None:
    """``sql`` with ``$n`` for its ``%s`` (positional) or ``%(name)s`` placeholders (a name
    used twice is one parameter, as psycopg has it) and ``%%`` as ``%``; the names in
    parameter order (None: positional). None for anything else (not sent here)."""
    if sql in _queries:
        return _queries[sql]
    names: dict[str, int] = {}
    positional = 0
    bad = False

    def placeholder(m: re.Match[str]) -> str:
        nonlocal positional, bad
        name, pos, percent, other = m.groups()
        if name is not None:
            return f"${names.setdefault(name, len(names) + 1)}"
        if pos is not None:
            positional += 1
            return f"${positional}"
        if percent is not None:
            return "%"
        bad = other is not None
        return ""

    text = _PLACEHOLDER.sub(placeholder, sql)
    converted: _Query | None = None
    if not bad and not (names and positional):
        converted = (text.encode(), tuple(names) if names else None)
    if len(_queries) < 10_000:
        _queries[sql] = converted
    return converted


def _flush(pgconn: Any) -> None:
    fd = pgconn.socket
    while pgconn.flush():  # 1: not all sent yet (a non-blocking connection)
        if _wait(fd, select.POLLIN | select.POLLOUT) & select.POLLIN:
            pgconn.consume_input()  # the server answers while we send: take it in, or both stall


def _wait(fd: int, events: int) -> int:
    """Block until ``fd`` is ready for ``events`` (poll(2): any descriptor number, unlike
    select(2)); the events that are ready (an error or hang-up reads as readable: the next
    libpq call reports it)."""
    poller = select.poll()
    poller.register(fd, events)
    ready = 0
    for _, got in poller.poll():
        ready |= got
    if ready & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
        ready |= select.POLLIN
    return ready


def _results(pgconn: Any, n: int) -> list[Any]:
    """The last result of each of ``n`` queued commands, up to the ``Sync``."""
    from psycopg import pq

    sync = pq.ExecStatus.PIPELINE_SYNC
    fd = pgconn.socket
    out: list[Any] = []
    last = None
    while True:
        while pgconn.is_busy():
            _wait(fd, select.POLLIN)
            pgconn.consume_input()
        res = pgconn.get_result()
        if res is None:  # the end of one command's results
            out.append(last)
            last = None
        elif res.status == sync:
            break
        else:
            last = res
    if len(out) != n:
        from psycopg.errors import InternalError

        raise InternalError(f"pipeline: {len(out)} results for {n} commands")
    return out
