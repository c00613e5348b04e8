"""PostgreSQL: a pipeline of statements sent on libpq's connection directly, one flush, one wait.

psycopg's own pipeline (``conn.pipeline()`` with a cursor) drives a Python generator and a
wait per statement, and its exit another two: at the two to four statements of a batch
transaction that is most of the client's CPU for it (measured, psycopg 3.3: about 160 µs per
``BEGIN`` + claim, rows + ``COMMIT`` against about 40 µs sent here). :func:`run` sends the same
statements on the connection's ``pgconn`` in pipeline mode, one ``Sync`` at the end (as
psycopg's pipeline does), and reads the results in one loop.

What the server sees is what a psycopg cursor sends:

* parameters are adapted by the connection's own ``Transformer`` (its dumpers, formats and
  type oids, so a value means what it means through a cursor);
* a statement with parameters is prepared once per connection and parameter types (psycopg's
  own cache keys the same way), so the server parses and plans it once, not per batch. A
  statement counts as prepared only once the server answered its ``Parse``;
* a failed statement raises the error psycopg raises for it
  (``psycopg.errors.error_from_result``); the statements after it were skipped by the server
  up to the ``Sync``, as in psycopg's pipeline.

:func:`usable` says whether :func:`run` takes the statements (``%s`` placeholders, sequences
of parameters); the caller runs the others as before.
"""

from __future__ import annotations

import contextlib
import select
import weakref
from collections.abc import Sequence
from typing import Any

# at most this many statements prepared per connection by this module; beyond, unnamed ones
MAX_PREPARED = 200

Statements = Sequence[tuple[str, Sequence[Sequence[Any]]]]


class _Conn:
    """Per DB-API connection: its Transformer and the statements prepared on it."""

    __slots__ = ("next_name", "prepared", "tx")

    def __init__(self, dbapi: Any) -> None:
        from psycopg.adapt import Transformer

        self.tx: Any = Transformer(dbapi)
        self.prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.next_name = 0


_conns: weakref.WeakKeyDictionary[Any, _Conn] = weakref.WeakKeyDictionary()
_queries: dict[str, bytes | None] = {}  # SQL with %s placeholders -> $n form (None: not ours)


def usable(statements: Statements) -> bool:
    """:func:`run` takes these: each SQL's placeholders are ``%s`` (``%%`` a percent sign) and
    each parameter row is a sequence."""
    for sql, rows in statements:
        if _query(sql) is None:
            return False
        for row in rows:
            if isinstance(row, dict):
                return False
    return True


def run(dbapi: Any, statements: Statements, *, rows_of: int = -1) -> list[Any]:
    """Send each statement once per parameter row, then a ``Sync``, in one flush; wait for every
    result. Returns the first column of every row statement ``rows_of`` returned (its last
    parameter row's), ``[]`` when ``rows_of`` is -1. Raises the first failed statement's error
    as psycopg does; a broken connection raises psycopg's ``OperationalError``."""
    state = _conns.get(dbapi)
    if state is None:
        state = _conns[dbapi] = _Conn(dbapi)
    sends = _adapted(state.tx, statements)  # before anything is sent: a value that cannot be
    expect: list[_Expect] = []  # adapted leaves the connection as it was
    try:
        results = _exchange(dbapi.pgconn, state, sends, expect)
    except BaseException:
        # sent in part, or results unread: its state is not known, so it is not used again
        # (closed: SQLAlchemy takes the error as a disconnect and invalidates it)
        for _, key in expect:
            if key is not None:
                state.prepared.pop(key, None)
        with contextlib.suppress(Exception):
            dbapi.close()
        raise
    return _outcome(dbapi, state, expect, results, rows_of)


# per parameter row: (statement index, query, adapted params or None, types, formats)
_Send = tuple[int, bytes, Any, tuple[int, ...], list[Any]]
# per command sent: (statement index, or -1 for a Parse with its cache key)
_Expect = tuple[int, tuple[bytes, tuple[int, ...]] | None]


def _adapted(tx: Any, statements: Statements) -> list[_Send]:
    from psycopg.adapt import PyFormat

    sends: list[_Send] = []
    for index, (sql, rows) in enumerate(statements):
        query = _query(sql)
        assert query is not None  # usable() said so
        for row in rows:
            if not row:
                sends.append((index, query, None, (), []))
                continue
            params = tx.dump_sequence(row, [PyFormat.AUTO] * len(row))
            sends.append((index, query, params, tuple(tx.types), list(tx.formats)))
    return sends


def _exchange(pgconn: Any, state: _Conn, sends: list[_Send], expect: list[_Expect]) -> list[Any]:
    """Send ``sends`` in pipeline mode and a ``Sync``; the last result of each command."""
    prepared = state.prepared
    pgconn.enter_pipeline_mode()
    for index, query, params, types, formats in sends:
        if params is None:
            pgconn.send_query_params(query, None)
            expect.append((index, None))
            continue
        key = (query, types)
        name = prepared.get(key)
        if name is None and len(prepared) < MAX_PREPARED:
            name = b"_fleet_%d" % state.next_name
            state.next_name += 1
            pgconn.send_prepare(name, query, param_types=types)
            expect.append((-1, key))  # the Parse's own result
            prepared[key] = name  # until its answer says otherwise (_outcome)
        if name is not None:
            pgconn.send_query_prepared(name, params, param_formats=formats)
        else:
            pgconn.send_query_params(query, params, param_types=types, param_formats=formats)
        expect.append((index, None))
    pgconn.pipeline_sync()
    _flush(pgconn)
    results = _results(pgconn, len(expect))
    pgconn.exit_pipeline_mode()
    return results


def _outcome(
    dbapi: Any, state: _Conn, expect: list[_Expect], results: list[Any], rows_of: int
) -> list[Any]:
    from psycopg import pq
    from psycopg.errors import error_from_result

    error = None
    out: list[Any] = []
    done = pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK
    for (index, key), res in zip(expect, results, strict=True):
        ok = res is not None and res.status in done
        if key is not None and not ok:
            state.prepared.pop(key, None)  # not prepared after all: prepared again next time
        if res is not None and res.status == pq.ExecStatus.FATAL_ERROR and error is None:
            error = error_from_result(res, encoding=dbapi.info.encoding)
        if ok and index == rows_of >= 0:
            tx = state.tx
            tx.set_pgresult(res)
            out = [row[0] for row in tx.load_rows(0, res.ntuples, tuple)]
    if error is not None:
        raise error
    return out


def _query(sql: str) -> bytes | None:
    query = _queries.get(sql, b"")
    if query != b"":
        return query
    parts = sql.split("%")
    out = [parts[0]]
    n = 0
    i = 1
    ok = True
    while i < len(parts):
        part = parts[i]
        if part.startswith("s"):
            n += 1
            out.append(f"${n}{part[1:]}")
        elif part == "" and i + 1 < len(parts):  # "%%": a percent sign
            out.append("%" + parts[i + 1])
            i += 1
        else:
            ok = False
            break
        i += 1
    converted = "".join(out).encode() if ok else None
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
