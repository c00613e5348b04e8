"""PostgreSQL: a transaction's statements in as few round trips as the results allow.

On PostgreSQL every statement is a round trip, and psycopg adds one more per transaction: its
implicit ``BEGIN`` waits for its answer before the first statement is sent (even in pipeline
mode). A transaction whose first statement is known up front and whose writes need no answer
back can do better with psycopg's pipeline mode (``conn.pipeline()``: statements queued, one
flush, one wait):

* :func:`begin_with` -- ``BEGIN`` and the transaction's first statement in one round trip
  (the connection is switched to autocommit while idle, so psycopg sends no ``BEGIN`` of its
  own; the explicit ``BEGIN`` keeps every later statement in the transaction);
* :func:`defer` / :func:`commit` -- writes nobody reads back (a :class:`Tail`), queued and sent
  with the ``COMMIT``: one round trip for the rows and the commit;
* :func:`claims_only` and :func:`each_without_flush` -- commits that need not wait for the WAL
  flush, for the few writes whose loss in a server crash costs only a repeat.

They are opt-in per connection (:func:`enable` / :func:`disable`, or :func:`transaction`): a
connection that did not enable them runs every statement as before. An error is raised as SQLAlchemy raises a driver
error (the connection's own handling wraps it as a ``DBAPIError`` and invalidates a
disconnected connection), so callers that catch ``SQLAlchemyError`` see no difference. A
statement of the pipeline that fails aborts the rest: nothing of the transaction is committed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, Engine, Table

from . import pg_wire

_STATE = "fleet_pg_pipeline"  # key in the pooled connection's ``info``
_NO_WAL_WAIT = "SET LOCAL synchronous_commit TO off"


class Lead:
    """A read queued to go with the transaction's first statement (:func:`lead`)."""

    __slots__ = ("_conn", "_rows", "params", "sql")

    def __init__(self, conn: Connection, sql: str, params: Sequence[Any]) -> None:
        self._conn, self.sql, self.params = conn, sql, params
        self._rows: list[tuple[Any, ...]] | None = None

    def rows(self) -> list[tuple[Any, ...]]:
        """Its rows: those :func:`begin_with` brought back, or else read now (in the same
        transaction, which must still be open), once."""
        if self._rows is None:
            tail = state(self._conn)
            if tail is not None and self in tail.leads:
                tail.leads.remove(self)
            try:
                self._rows = all_rows(self._conn.connection.dbapi_connection, self.sql, self.params)
            except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
                self._conn._handle_dbapi_exception(exc, self.sql, self.params, None, None)
        return self._rows


class Tail:
    """The writes of one transaction held back until its commit (see the module doc)."""

    __slots__ = ("explicit_begin", "flush_wal", "leads", "writes")

    def __init__(self) -> None:
        self.leads: list[Lead] = []  # reads to go with the first statement (begin_with)
        self.writes: list[tuple[str, Sequence[Sequence[Any]]]] = []
        self.explicit_begin = False  # begin_with sent the BEGIN (autocommit is on until idle)
        self.flush_wal = True  # False: the COMMIT need not wait for the WAL flush (see below)


def on_postgresql(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def enable(conn: Connection) -> None:
    """Opt ``conn`` in for one transaction (call before its first statement)."""
    conn.info[_STATE] = Tail()


def state(conn: Connection) -> Tail | None:
    tail: Tail | None = conn.info.get(_STATE)
    return tail


def disable(conn: Connection) -> None:
    """After the transaction ended: the connection as psycopg keeps it by default again (no
    autocommit), a transaction still open rolled back first. A connection that cannot be put
    back so is invalidated: the pool never hands one out in autocommit."""
    tail = conn.info.pop(_STATE, None)
    if tail is None or not tail.explicit_begin or conn.invalidated or conn.closed:
        return
    dbapi: Any = conn.connection.dbapi_connection
    try:
        if dbapi.pgconn.transaction_status != _idle():
            dbapi.rollback()
        if dbapi.autocommit:  # begin_with's fallback switched it on
            dbapi.autocommit = False
    except Exception:  # noqa: BLE001 - its state is not known: the pool drops it
        conn.invalidate()


def _unbegun(conn: Connection) -> tuple[Tail | None, Any]:
    """``conn``'s :class:`Tail` and DB-API connection when it is enabled and its transaction
    has sent nothing yet (no ``BEGIN``: psycopg's is sent with the first statement); else
    ``(None, None)``."""
    tail = state(conn)
    if tail is None:
        return None, None
    dbapi: Any = conn.connection.dbapi_connection
    if dbapi.pgconn.transaction_status != _idle() or dbapi.autocommit:
        return None, None
    return tail, dbapi


def lead(conn: Connection, sql: str, params: Sequence[Any]) -> Lead | None:
    """On an enabled connection whose transaction has sent nothing yet: queue the read ``sql``
    to go in the round trip of the transaction's first statement (:func:`begin_with`: the batch
    transaction's dedupe claim), ahead of it. None otherwise (the caller reads now). The read
    must not depend on that statement; a lead it did not carry reads itself when asked."""
    tail = _unbegun(conn)[0]
    if tail is None:
        return None
    ahead = Lead(conn, sql, params)
    tail.leads.append(ahead)
    return ahead


def begin_with(conn: Connection, sql: str, params: Sequence[Any]) -> list[Any] | None:
    """On an enabled, idle connection: ``BEGIN`` + ``sql`` in one round trip (with the reads
    queued by :func:`lead` between them); the first column of every row ``sql`` returns. None
    when the fast path does not apply (the caller runs ``sql`` as usual: psycopg begins the
    transaction itself)."""
    tail, dbapi = _unbegun(conn)
    if tail is None:
        return None
    begin = _begin_sql(dbapi)
    leads, tail.leads = tail.leads, []
    statements: list[tuple[str, Sequence[Sequence[Any]]]] = [(begin, [()])]
    statements += [(ahead.sql, [ahead.params]) for ahead in leads]
    statements.append((sql, [params]))
    tail.explicit_begin = True
    if pg_wire.usable(statements):  # BEGIN sent by us: psycopg, out of autocommit, sees it
        at = len(statements) - 1
        try:
            got = pg_wire.run_rows(dbapi, statements, range(1, at + 1))
        except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
            conn._handle_dbapi_exception(exc, sql, params, None, None)
        for n, ahead in enumerate(leads, start=1):
            ahead._rows = got.get(n, [])
        return [row[0] for row in got.get(at, [])]
    tail.leads = leads  # not carried: each reads itself when asked
    dbapi.autocommit = True  # client side only: psycopg sends no BEGIN of its own now
    cursor = dbapi.cursor()
    try:
        with dbapi.pipeline():
            cursor.execute(begin)
            cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
    finally:
        cursor.close()


def defer(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> bool:
    """Queue an ``executemany`` for the commit (:func:`commit`); False when ``conn`` is not
    enabled (the caller runs it now)."""
    tail = state(conn)
    if tail is None:
        return False
    tail.writes.append((sql, rows))
    return True


def claims_only(conn: Connection) -> None:
    """The transaction wrote nothing but dedupe claims (and their releases): its ``COMMIT``
    need not wait for the WAL flush (``SET LOCAL synchronous_commit TO off``).

    WAL is replayed in order, so such a commit is lost in a server crash only together with
    everything committed after it, and a later durable commit (the inject journal's open,
    before any inject) makes it durable. Lost, it takes its claims with it, and nothing else:
    a record redelivered is applied as if for the first time, which is what a claim that was
    never committed means. A batch that holds rows, stages calls or releases a quarantined
    record keeps the flush (the runtime decides: ``loop.py``)."""
    tail = state(conn)
    if tail is not None:
        tail.flush_wal = False


def commit(conn: Connection) -> None:
    """Send the queued writes and ``COMMIT`` in one round trip. SQLAlchemy's own commit that
    follows finds the transaction over and sends nothing. With nothing queued it does nothing
    (SQLAlchemy's commit commits as usual)."""
    tail = state(conn)
    if tail is None:
        return
    if not tail.flush_wal:
        tail.flush_wal = True
        tail.writes.append((_NO_WAL_WAIT, [()]))
    if not tail.writes:
        return
    writes, tail.writes = tail.writes, []
    dbapi: Any = conn.connection.dbapi_connection
    statements = [*writes, ("COMMIT", [()])]
    if dbapi.pgconn.transaction_status == _idle() and not dbapi.autocommit:
        # nothing ran yet in the transaction: begin it, as psycopg's cursor would have
        statements.insert(0, (_begin_sql(dbapi), [()]))
    if pg_wire.usable(statements):
        try:
            pg_wire.run(dbapi, statements)
        except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
            conn._handle_dbapi_exception(exc, writes[0][0], writes[0][1], None, None)
        return
    cursor = dbapi.cursor()
    sql, rows = writes[0]
    try:
        with dbapi.pipeline():
            for sql, rows in writes:
                cursor.executemany(sql, rows)
            cursor.execute("COMMIT")  # the writes began a transaction if none was open
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, rows, cursor, None)
    finally:
        cursor.close()


def one_row(dbapi: Any, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """``sql`` run once in the connection's transaction on :mod:`.pg_wire` (with the ``BEGIN``
    psycopg would send first, when nothing ran in it yet: one round trip for both); its first
    row, or None. A driver error is raised as the driver raises it."""
    rows = all_rows(dbapi, sql, params)
    return rows[0] if rows else None


def all_rows(
    dbapi: Any,
    sql: str,
    params: Sequence[Any],
    *,
    before: Sequence[tuple[str, Sequence[Sequence[Any]]]] = (),
    then: tuple[str, Sequence[Any]] | None = None,
) -> list[tuple[Any, ...]]:
    """:func:`one_row`, every row ``sql`` returns. ``before``: writes whose answer nobody reads
    (``(sql, parameter rows)``, each run once per row), sent ahead of ``sql`` in the same round
    trip; ``then``: a statement sent after it (the transaction's ``COMMIT``). The server skips
    everything after a statement that fails."""
    statements: list[tuple[str, Sequence[Sequence[Any]]]] = [*before, (sql, [params])]
    if then is not None:
        statements.append((then[0], [then[1]]))
    at = len(before)
    if dbapi.pgconn.transaction_status == _idle() and not dbapi.autocommit:
        statements.insert(0, (_begin_sql(dbapi), [()]))
        at += 1
    if not pg_wire.usable(statements):
        cursor = dbapi.cursor()
        try:
            for write, each in before:
                cursor.executemany(write, each)
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
            if then is not None:
                cursor.execute(then[0], then[1])
            return rows
        finally:
            cursor.close()
    got: list[tuple[Any, ...]] = pg_wire.run(dbapi, statements, rows_of=at, whole_rows=True)
    return got


def insert_sql(table: Table, keys: Sequence[str], dialect: Dialect) -> str:
    """``INSERT INTO table (keys...) VALUES (%s, ...)``: positional, no ``RETURNING``."""
    quote = dialect.identifier_preparer
    columns = ", ".join(quote.quote(table.c[k].name) for k in keys)
    values = ", ".join(["%s"] * len(keys))
    return f"INSERT INTO {quote.format_table(table)} ({columns}) VALUES ({values})"


def _begin_sql(dbapi: Any) -> str:
    """The ``BEGIN`` psycopg would send (the isolation level SQLAlchemy set on the connection)."""
    parts = ["BEGIN"]
    level = dbapi.isolation_level
    if level is not None:
        parts += ["ISOLATION LEVEL", level.name.replace("_", " ")]
    if dbapi.read_only is not None:
        parts.append("READ ONLY" if dbapi.read_only else "READ WRITE")
    if dbapi.deferrable is not None:
        parts.append("DEFERRABLE" if dbapi.deferrable else "NOT DEFERRABLE")
    return " ".join(parts)


def _idle() -> Any:
    from psycopg import pq  # PostgreSQL only: loaded when a PostgreSQL connection is used

    return pq.TransactionStatus.IDLE


def each_without_flush(conn: Connection, sql: str, params: Sequence[Sequence[Any]]) -> None:
    """On an autocommit PostgreSQL connection: ``sql`` once per parameter row, each in a
    transaction of its own whose commit does not wait for the WAL flush
    (``SET LOCAL synchronous_commit TO off``), all in one round trip.

    Only for a write whose loss in a server crash costs nothing but a repeat: WAL is replayed
    in order, so a later durable commit makes every earlier one durable too, and only the last
    few such commits before a crash can be lost (the relay's ack: those rows are sent again,
    and the consumer's dedupe drops the copies). A commit without the flush costs the server
    a fraction of one with it, and releases its row lock at once."""
    one: Sequence[Any] = ()
    cursor: Any = None
    try:
        each_without_flush_raw(conn.connection.dbapi_connection, sql, params)
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, one, cursor, None)


def each_without_flush_raw(dbapi: Any, sql: str, params: Sequence[Sequence[Any]]) -> None:
    """:func:`each_without_flush` on an autocommit psycopg connection itself; a driver error is
    raised as the driver raises it (the relay's held connection: its caller handles those)."""
    one_each: list[tuple[str, Sequence[Sequence[Any]]]] = []
    for one in params:
        one_each += (("BEGIN", [()]), (_NO_WAL_WAIT, [()]), (sql, [one]), ("COMMIT", [()]))
    if pg_wire.usable(one_each):
        pg_wire.run(dbapi, one_each)
        return
    cursor = dbapi.cursor()
    try:
        with dbapi.pipeline():
            for one in params:
                cursor.execute("BEGIN")
                cursor.execute(_NO_WAL_WAIT)
                cursor.execute(sql, one)
                cursor.execute("COMMIT")
    finally:
        cursor.close()


@contextlib.contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """``engine.begin()`` with :func:`enable` on: ``BEGIN`` rides with the first statement
    that uses :func:`begin_with`, the deferred writes with the ``COMMIT``."""
    with engine.connect() as conn:
        enable(conn)
        try:
            with conn.begin():
                yield conn
                commit(conn)
        finally:
            disable(conn)
