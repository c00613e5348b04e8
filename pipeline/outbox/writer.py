"""The write side: ``write`` puts one export intent in the caller's own transaction.

R-OUT-1: "export intent is written in the same transaction as the state"; "the framework never
calls a broker from the execution path". Nothing here imports a Kafka client, and nothing here
commits: the caller's commit makes state and intent durable together, a rollback drops both.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from pipeline.errors import ConfigError, DeliveryError
from pipeline.reasons import Outbox
from pipeline.record import Headers
from pipeline.record_headers import pack_headers
from pipeline.store import pg_pipeline

from .limits import DEFAULT_MAX_RECORD_BYTES, check_record_size, packed_record_size
from .notify import notify, wakes_in_process
from .sent import watermark
from .tables import RowStatus, outbox, outbox_branch, outbox_sent
from .wake import mark, note, wants_rows

HELD = "fleet_outbox_held"
"""``session.info`` key: ``(DB-API connection, Engine)`` under the session's transaction, set for
each transaction by a writer that holds that connection and runs its transactions on it (the
gateway socket's :class:`~pipeline.gateway.writer_session.WriterSession`): :func:`write` then
skips ``Session.connection()``, SQLAlchemy's transaction bookkeeping, several µs per row (not
inside a savepoint, where the session's own path is kept)."""


def write(
    session: Session | Connection,
    *,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None = None,
    branch_key: str,
    tenant: str = "default",
    max_record_bytes: int | None = DEFAULT_MAX_RECORD_BYTES,
) -> int:
    """Queue one Kafka record for the relay, inside the caller's transaction; return its lsn.

    The lsn is the next one of ``(tenant, branch_key)``, starting at 1, without gaps. All records of
    one branch should share ``(topic, key)`` so the broker keeps them on one partition, in order.
    A record above ``max_record_bytes`` (the topic's ``max.message.bytes``; ``None``: no check)
    is refused with ``TOO_LARGE`` before anything is written.

    ``session`` may be a ``Connection`` in its transaction, for a writer that runs no ORM
    session (the inject queue's receipts): then nothing marks the transaction, so the writer
    wakes its relay itself after the commit (handing it the rows first if it collects them,
    :func:`.wake.collect`) and, on PostgreSQL, sends :data:`.notify.CHANNEL`'s
    ``NOTIFY`` in the transaction (invariant 9, docs/outbox.md).
    """
    if not topic or not branch_key or not tenant:
        raise ConfigError("outbox.write needs a topic, a branch_key and a tenant")
    packed = pack_headers(headers)
    if max_record_bytes is not None:
        check_record_size(
            packed_record_size(key=key, value=value, packed=packed, count=len(headers or ()),
                               tenant=tenant, branch_key=branch_key, lsn=10**12),
            max_record_bytes,
            topic=topic,
        )  # fmt: skip
    raw, engine = _connection(session)
    dialect = engine.dialect
    on_pg = dialect.name == "postgresql"
    sql = _sql_for(dialect.paramstyle, on_pg=on_pg)
    blob = packed or None  # NULL: no headers (as since v0.1.0)
    dbapi_error = dialect.loaded_dbapi.Error
    fed: tuple[Any, ...] | None = None  # the row as the relay reads it, for its feed (wake.py)
    statement: str = sql.next_lsn
    params: tuple[Any, ...] = (tenant, branch_key)
    try:
        if sql.both is not None:  # one round trip: the upsert feeds the insert
            statement = sql.both
            params = (tenant, branch_key, topic, key, value, blob, _PENDING, time.time())
            row: Any = pg_pipeline.one_row(raw, statement, params)  # none: branch abandoned
            lsn, abandoned = (0, True) if row is None else (row[1], False)
            if row is not None and wants_rows(engine):  # the id comes back with the lsn
                fed = (row[0], tenant, branch_key, lsn, topic, key, value, blob, params[-1])
        else:
            cursor = raw.cursor()
            cursor.execute(statement, params)
            row = cursor.fetchone()  # the upsert returns its row
            lsn, abandoned, active = row
            if not abandoned:
                for statement, params in _reopening(sql, tenant, branch_key, lsn, active):
                    cursor.execute(statement, params)
                statement = sql.insert
                params = (tenant, branch_key, lsn, topic, key, value, blob, _PENDING, time.time())
                cursor.execute(statement, params)
                if wants_rows(engine):  # SQLite: the id comes with the insert
                    fed = (cursor.lastrowid, tenant, branch_key, lsn, topic, key, value, blob,
                           params[-1])  # fmt: skip
    except dbapi_error as exc:  # as SQLAlchemy raises it: callers catch SQLAlchemyError
        raise DBAPIError.instance(statement, params, exc, dbapi_error, dialect=dialect) from exc
    if abandoned:
        raise _abandoned(tenant, branch_key)
    if isinstance(session, Session):
        # a relay in this process wakes at our commit, fed this row (wake.py)
        mark(session, fed, raw)
        if on_pg:
            notify(session)  # a relay in another process wakes at our commit
    elif fed is not None:
        note(session, fed)  # for a writer that collects them (wake.collect)
    return int(lsn)


def write_branch(
    session: Session | Connection,
    records: Sequence[tuple[bytes | None, bytes | None, Headers | None]],
    *,
    topic: str,
    branch_key: str,
    tenant: str = "default",
    commit: bool = False,
    before: Sequence[tuple[str, Sequence[Sequence[Any]]]] = (),
) -> list[int]:
    """:func:`write` for each ``(key, value, headers)`` of ``records``, in order, all on one branch
    and topic, in the transaction of ``session``: the same rows, lsns, checks and wakes as a
    :func:`write` each, in one upsert that takes the branch's next ``len(records)`` lsns and one
    statement that inserts the rows (a burst's receipts share their sender's branch; a socket
    group's sends to one recipient theirs). On PostgreSQL the two are one statement, one round
    trip. Inside a savepoint it is a :func:`write` each. Returns the lsns.

    ``commit``: these are the transaction's last statements and the caller commits right after.
    On PostgreSQL, for a store whose relay is woken in this process (no ``NOTIFY`` to send:
    the gateway), the ``COMMIT`` then goes with the rows, in the same round trip; an abandoned
    branch fails that statement instead of returning no row, so nothing of the transaction
    commits (``BRANCH_ABANDONED`` all the same). Elsewhere it changes nothing.

    ``before``: writes of the same transaction whose answer nobody reads, as ``(DB-API SQL,
    parameter rows)`` (the socket group's tracking rows), run ahead of the rows: on PostgreSQL
    in the rows' round trip, elsewhere on the session's cursor first."""
    if len(records) > _MAX_ROWS:  # far below SQLite's bound on a statement's parameters
        head = write_branch(session, records[:_MAX_ROWS], topic=topic, branch_key=branch_key,
                            tenant=tenant, before=before)  # fmt: skip
        return head + write_branch(session, records[_MAX_ROWS:], topic=topic,
                                   branch_key=branch_key, tenant=tenant, commit=commit)  # fmt: skip
    nested = session.in_nested_transaction()
    raw, engine = _connection(session)
    if not records:
        if before:
            _run_now(raw, engine, before)
        return []
    on_pg = engine.dialect.name == "postgresql"
    commit = commit and on_pg and not nested and wakes_in_process(engine)
    rides = on_pg and not nested and (len(records) > 1 or commit)
    if before and not rides:
        _run_now(raw, engine, before)
    if nested or (len(records) == 1 and not commit):
        return [write(session, topic=topic, key=k, value=v, headers=h, branch_key=branch_key,
                      tenant=tenant) for k, v, h in records]  # fmt: skip
    if not topic or not branch_key or not tenant:
        raise ConfigError("outbox.write needs a topic, a branch_key and a tenant")
    blobs = [_checked_blob(r, topic=topic, branch_key=branch_key, tenant=tenant) for r in records]
    now = time.time()
    if on_pg:
        abandoned, first, ids = _take_rows_pg(
            raw, engine, records, blobs, topic=topic, branch_key=branch_key, tenant=tenant,
            now=now, commit=commit, before=before,
        )  # fmt: skip
    else:
        abandoned, first, ids = _take_rows_sqlite(
            raw, engine, records, blobs, topic=topic, branch_key=branch_key, tenant=tenant, now=now
        )
    if abandoned:
        raise _abandoned(tenant, branch_key)
    lsns = [first + i for i in range(len(records))]
    fed: list[tuple[Any, ...]] = []
    if wants_rows(engine):  # the rows as the relay reads them (wake.py)
        fed = [(ids[lsn], tenant, branch_key, lsn, topic, k, v, blob, now)
               for lsn, (k, v, _), blob in zip(lsns, records, blobs, strict=True)]  # fmt: skip
    if isinstance(session, Session):
        # a relay in this process wakes at our commit, fed these rows (wake.py)
        if not fed:
            mark(session)
        for row in fed:
            mark(session, row, raw)
        if on_pg:
            notify(session)  # a relay in another process wakes at our commit
    else:
        for row in fed:
            note(session, row)  # for a writer that collects them (wake.collect)
    return lsns


_Record = tuple[bytes | None, bytes | None, Headers | None]
Taken = tuple[bool, int, dict[int, int]]  # abandoned, the first lsn taken, {lsn: row id}


def _checked_blob(record: _Record, *, topic: str, branch_key: str, tenant: str) -> bytes | None:
    """``record``'s packed headers (None: none), after the size check :func:`write` makes."""
    key, value, headers = record
    blob = pack_headers(headers) or None
    size = packed_record_size(key=key, value=value, packed=blob or b"", count=len(headers or ()),
                              tenant=tenant, branch_key=branch_key, lsn=10**12)  # fmt: skip
    check_record_size(size, DEFAULT_MAX_RECORD_BYTES, topic=topic)
    return blob


def _take_rows_pg(
    raw: Any, engine: Engine, records: Sequence[_Record], blobs: list[bytes | None], *,
    topic: str, branch_key: str, tenant: str, now: float, commit: bool,
    before: Sequence[tuple[str, Sequence[Sequence[Any]]]],
) -> Taken:  # fmt: skip
    """PostgreSQL: the lsns and the rows in one statement, one round trip (_BOTH_ROWS_SQL);
    with ``commit``, the ``COMMIT`` in the same round trip (_BOTH_ROWS_OR_FAIL_SQL); the
    ``before`` writes ahead of it in that round trip."""
    n = len(records)
    params = (tenant, branch_key, n, n, n, topic, _PENDING, now,
              [k for k, _, _ in records], [v for _, v, _ in records], blobs)  # fmt: skip
    sql = _BOTH_ROWS_OR_FAIL_SQL if commit else _BOTH_ROWS_SQL
    error = engine.dialect.loaded_dbapi.Error
    try:
        then = ("COMMIT", ()) if commit else None
        rows = pg_pipeline.all_rows(raw, sql, params, before=before, then=then)
    except error as exc:  # as SQLAlchemy raises it: callers catch SQLAlchemyError
        if commit and _ABANDONED_MARK in str(exc):
            return True, 0, {}  # the statement failed: nothing of the transaction commits
        raise DBAPIError.instance(sql, params, exc, error, dialect=engine.dialect) from exc
    ids = {int(lsn): int(row_id) for row_id, lsn in rows}
    return not ids, min(ids, default=0), ids  # no row: the branch is abandoned


def _run_now(
    raw: Any, engine: Engine, statements: Sequence[tuple[str, Sequence[Sequence[Any]]]]
) -> None:
    """Run ``statements`` (``(DB-API SQL, parameter rows)``) on the DB-API connection now, a
    driver error raised as SQLAlchemy raises it."""
    error = engine.dialect.loaded_dbapi.Error
    sql: str = ""
    rows: Sequence[Sequence[Any]] = ()
    try:
        cursor = raw.cursor()
        for sql, rows in statements:
            cursor.executemany(sql, rows)
    except error as exc:  # as SQLAlchemy raises it: callers catch SQLAlchemyError
        raise DBAPIError.instance(sql, rows, exc, error, dialect=engine.dialect) from exc


def _take_rows_sqlite(
    raw: Any, engine: Engine, records: Sequence[_Record], blobs: list[bytes | None], *,
    topic: str, branch_key: str, tenant: str, now: float,
) -> Taken:  # fmt: skip
    """SQLite: the branch's lsns in one upsert, its re-listing steps, the rows in one insert."""
    n = len(records)
    sql = _sql_for(engine.dialect.paramstyle, on_pg=False)
    error = engine.dialect.loaded_dbapi.Error
    statement: str = _TAKE_SQL
    params: Sequence[Any] = (tenant, branch_key, n, n)
    try:
        cursor = raw.cursor()
        cursor.execute(statement, params)
        last, abandoned, active = cursor.fetchone()  # the upsert returns its row
        if abandoned:
            return True, 0, {}
        first = last - n + 1
        for statement, params in _reopening(sql, tenant, branch_key, first, active):
            cursor.execute(statement, params)
        statement = _insert_rows(n)
        params = [
            column
            for i, ((key, value, _), blob) in enumerate(zip(records, blobs, strict=True))
            for column in (tenant, branch_key, first + i, topic, key, value, blob, _PENDING, now)
        ]
        cursor.execute(statement, params)
        return False, first, {lsn: row_id for row_id, lsn in cursor.fetchall()}
    except error as exc:  # as SQLAlchemy raises it: callers catch SQLAlchemyError
        raise DBAPIError.instance(statement, params, exc, error, dialect=engine.dialect) from exc


def _reopening(
    sql: _WriteSql, tenant: str, branch_key: str, first_lsn: int, active: bool
) -> list[tuple[str, tuple[str, str]]]:
    """What a write runs after taking its lsns on a live branch: the branch listed again when the
    relay found it all sent (tables.py), and a new branch's watermark row (the relay acks there).
    The caller runs them, so a failing one is the statement its error names."""
    steps = []
    if not active:
        steps.append((sql.activate, (tenant, branch_key)))
    if first_lsn == 1:
        steps.append((sql.new_branch, (tenant, branch_key)))
    return steps


def _abandoned(tenant: str, branch_key: str) -> DeliveryError:
    return DeliveryError(
        f"branch {branch_key!r} of tenant {tenant!r} was abandoned; write to the live branch",
        reason=Outbox.BRANCH_ABANDONED,
        context={"tenant": tenant, "branch_key": branch_key},
    )


# write_branch's upsert: the branch's next ``n`` lsns in one statement (a new branch starts at 1)
_TAKE_SQL = (
    "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, active) "
    "VALUES (?, ?, ?, 0, 1) "
    "ON CONFLICT (tenant, branch_key) DO UPDATE SET last_lsn = outbox_branch.last_lsn + ? "
    "RETURNING last_lsn, abandoned, active"
)
_insert_sql: dict[int, str] = {}
_MAX_ROWS = 100


def _insert_rows(n: int) -> str:
    """write_branch's insert of ``n`` rows, their ids and lsns back."""
    sql = _insert_sql.get(n)
    if sql is None:
        row = "(?, ?, ?, ?, ?, ?, ?, ?, ?)"
        sql = _insert_sql[n] = (
            "INSERT INTO outbox (tenant, branch_key, lsn, topic, key, value, headers, status, "
            f"created_at) VALUES {', '.join([row] * n)} RETURNING id, lsn"
        )
    return sql


def _connection(session: Session | Connection) -> tuple[Any, Engine]:
    """The DB-API connection under ``session``'s transaction, and its engine: the held one
    (:data:`HELD`) without ``Session.connection()``, except inside a savepoint."""
    if isinstance(session, Session) and not session.in_nested_transaction():
        held: tuple[Any, Engine] | None = session.info.get(HELD)
        if held is not None:
            return held
    conn = session.connection() if isinstance(session, Session) else session
    return conn.connection.dbapi_connection, conn.engine


class _WriteSql(NamedTuple):
    next_lsn: str
    insert: str
    new_branch: str  # a new branch's watermark row (outbox_sent), made by its lsn 1's writer
    activate: str  # lists a branch the relay had found all sent (tables.py, ``active``)
    both: str | None  # PostgreSQL: the two as one statement (a data-modifying WITH)


# A send is on the hot path: both statements are DB-API text, executed on the raw
# cursor of the session's connection (so in its transaction), with a DB-API error raised as
# SQLAlchemy would (``DBAPIError.instance``: callers catch SQLAlchemyError). SQLAlchemy's
# per-statement compile, parameter and result work cost several times the SQL itself
# (``exec_driver_sql`` still 1.5x the raw cursor; measured). No
# cursor-execute event is registered on the store's engines.
# The upsert's row lock serialises writers of one branch until they commit, so lsns commit in
# order and never leave a gap (a rolled-back writer rolls its lsn back too).
# The upsert leaves ``active`` alone: SQLite rewrites a partial index's entry whenever an UPDATE
# sets a column of its condition, so the flag is set by a statement of its own, only by the
# writer that finds it clear (the relay had found the branch all sent).
_WRITE_SQL = (
    "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, active) "
    "VALUES ({p}, {p}, 1, {f}, {t}) "
    "ON CONFLICT (tenant, branch_key) DO UPDATE SET last_lsn = outbox_branch.last_lsn + 1 "
    "RETURNING last_lsn, abandoned, active",
    "INSERT INTO outbox (tenant, branch_key, lsn, topic, key, value, headers, status, created_at) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})",
    "INSERT INTO outbox_sent (tenant, branch_key, sent_lsn, abandoned) VALUES ({p}, {p}, 0, {f}) "
    "ON CONFLICT (tenant, branch_key) DO NOTHING",
    "UPDATE outbox_branch SET active = {t} WHERE tenant = {p} AND branch_key = {p}",
)
# PostgreSQL takes both as one statement, so a send's row costs one round trip, not two (SQLite
# has no INSERT inside WITH, nor round trips to save). No row back: the branch is abandoned; the
# row's id comes back with its lsn, for the relay's feed (wake.py).
# The writer of a branch's lsn 1 also makes its watermark row in ``outbox_sent``, which the
# relay's ack updates: a writer never locks that row again, so the ack never waits for a writer.
# PostgreSQL updates a row in place (HOT, no index entry) unless an indexed column's value
# changes, so here the upsert sets ``active`` itself: a change only when the relay had cleared it.
_BOTH_SQL = (
    "WITH b AS (INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, active) "
    "VALUES ({p}, {p}, 1, false, true) ON CONFLICT (tenant, branch_key) "
    "DO UPDATE SET last_lsn = outbox_branch.last_lsn + 1, active = true "
    "RETURNING tenant, branch_key, last_lsn, abandoned), "
    "s AS (INSERT INTO outbox_sent (tenant, branch_key, sent_lsn, abandoned) "
    "SELECT b.tenant, b.branch_key, 0, false FROM b WHERE b.last_lsn = 1 AND NOT b.abandoned "
    "ON CONFLICT (tenant, branch_key) DO NOTHING) "
    "INSERT INTO outbox (tenant, branch_key, lsn, topic, key, value, headers, status, created_at) "
    "SELECT b.tenant, b.branch_key, b.last_lsn, {p}, {p}, {p}, {p}, {p}, {p} FROM b "
    "WHERE NOT b.abandoned RETURNING id, lsn"
)
# write_branch's on PostgreSQL: the branch's next n lsns and the n rows (keys, values and
# headers as three arrays, so one prepared statement serves every n), ids in lsn order.
_BOTH_ROWS_SQL = (
    "WITH b AS (INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, active) "
    "VALUES (%s, %s, %s, false, true) ON CONFLICT (tenant, branch_key) "
    "DO UPDATE SET last_lsn = outbox_branch.last_lsn + EXCLUDED.last_lsn, active = true "
    "RETURNING tenant, branch_key, last_lsn, abandoned), "
    "s AS (INSERT INTO outbox_sent (tenant, branch_key, sent_lsn, abandoned) "
    "SELECT b.tenant, b.branch_key, 0, false FROM b WHERE b.last_lsn = %s AND NOT b.abandoned "
    "ON CONFLICT (tenant, branch_key) DO NOTHING) "
    "INSERT INTO outbox (tenant, branch_key, lsn, topic, key, value, headers, status, created_at) "
    "SELECT b.tenant, b.branch_key, b.last_lsn - %s + r.i, %s, r.k, r.v, r.h, %s, %s "
    "FROM b, unnest(%s::bytea[], %s::bytea[], %s::bytea[]) WITH ORDINALITY AS r(k, v, h, i) "
    "WHERE NOT b.abandoned ORDER BY r.i RETURNING id, lsn"
)
# The same for a statement sent with its transaction's COMMIT: an abandoned branch must fail
# it (the pipeline's COMMIT is then skipped), not return no row while the COMMIT goes through.
# SQL has no RAISE: a cast of a text naming the branch to an integer fails, and only when the
# branch is abandoned (a non-constant expression, never folded at planning time).
_ABANDONED_MARK = "fleet: abandoned branch"
_BOTH_ROWS_OR_FAIL_SQL = _BOTH_ROWS_SQL.replace(
    "WHERE NOT b.abandoned",
    f"WHERE CASE WHEN b.abandoned THEN CAST('{_ABANDONED_MARK} ' || b.branch_key AS integer) = 0"
    " ELSE true END",
)
_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s"}
_PENDING = int(RowStatus.PENDING)
_write_sql: dict[tuple[str, bool], _WriteSql] = {}


def _sql_for(paramstyle: str, *, on_pg: bool) -> _WriteSql:
    sql = _write_sql.get((paramstyle, on_pg))
    if sql is None:
        p = _PLACEHOLDER.get(paramstyle)
        if p is None:
            raise ConfigError(f"outbox: unsupported DB-API paramstyle {paramstyle!r}")
        false, true = ("0", "1") if paramstyle == "qmark" else ("false", "true")
        both = _BOTH_SQL.format(p=p) if on_pg else None
        next_lsn, insert, new_branch, activate = (
            text.format(p=p, f=false, t=true) for text in _WRITE_SQL
        )
        sql = _write_sql[(paramstyle, on_pg)] = _WriteSql(
            next_lsn, insert, new_branch, activate, both
        )
    return sql


def abandon_branch(session: Session, *, branch_key: str, tenant: str = "default") -> int:
    """Close a branch in the caller's transaction: its unsent rows are dropped, never published.

    Returns how many rows were dropped. Later writes to the branch fail with ``BRANCH_ABANDONED``.
    The branch's watermark row is flagged too, before the drop reads the watermark: an ack that
    committed first keeps its rows sent, one that comes later waits for this row and then
    matches nothing (its rows stay ``DROPPED``). Locks in the writers' order: the branch, then
    its watermark row.
    """
    session.execute(
        _insert_for(session)(outbox_branch)
        .values(tenant=tenant, branch_key=branch_key, last_lsn=0, abandoned=True)
        .on_conflict_do_update(
            index_elements=[outbox_branch.c.tenant, outbox_branch.c.branch_key],
            set_={"abandoned": True},
        )
    )
    session.execute(
        update(outbox_sent)
        .where(outbox_sent.c.tenant == tenant, outbox_sent.c.branch_key == branch_key)
        .values(abandoned=True)
    )
    result = session.execute(
        update(outbox)
        .where(
            outbox.c.tenant == tenant,
            outbox.c.branch_key == branch_key,
            outbox.c.status == int(RowStatus.PENDING),
            outbox.c.lsn > watermark(),  # a row already sent is not dropped
        )
        .values(status=int(RowStatus.DROPPED))
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _insert_for(session: Session) -> Any:
    """The dialect's ``insert`` (both have ``on_conflict_do_update`` and ``returning``)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert
    if dialect == "sqlite":
        return sqlite.insert
    raise ConfigError(f"outbox: unsupported database dialect {dialect!r}")


def branch_positions(session: Session, *, tenant: str | None = None) -> dict[tuple[str, str], int]:
    """``(tenant, branch_key) -> last lsn handed out`` (the next lsn is one more)."""
    stmt = select(outbox_branch.c.tenant, outbox_branch.c.branch_key, outbox_branch.c.last_lsn)
    if tenant is not None:
        stmt = stmt.where(outbox_branch.c.tenant == tenant)
    return {(t, b): int(n) for t, b, n in session.execute(stmt)}
