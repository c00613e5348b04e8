"""One deadline tracker: "sent X at t, expect an answer by t+d, else exactly one ``FAILED``".

It serves every send whose sender waits for an outcome, each kind a :class:`Tracked` value:

* a **forward send** to an inject-mode recipient (``host/tracking.py``): the answer is
  ``INJECTED``; none by the deadline is ``INJECT_TIMEOUT`` (R-ACK-5: "no INJECTED within a
  bound = fast explicit failure");
* a **SPAWN** (``control/requests.py``): the answer is the target's ``INJECTED`` (launched) or
  ``FAILED``; none by the deadline is ``SPAWN_TIMEOUT`` (R-SPAWN-3: a spawn costs like an
  injection);
* a **STOP** (``control/requests.py``): the answer is the target's ``INJECTED`` (stopped) or
  ``FAILED``; none by the deadline is ``STOP_TIMEOUT``.

A row is written in the send's own transaction (``pending``). The answer, or the deadline, moves
it out of ``pending`` with a conditional update, so it is settled exactly once. The deadline's
``FAILED`` (msgId ``failed-<msgId>``, :func:`~pipeline.envelope.receipts.failed_receipt`) is held for the sender in the same transaction as the
settle: both or neither, and a second tick finds nothing pending. A ``FAILED`` with that msgId
already held (the DLQ reporter's, about the same send) is kept as the one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    String,
    Table,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from pipeline.envelope.model import Envelope
from pipeline.envelope.receipts import failed_receipt
from pipeline.host import dbapi
from pipeline.host.due import overdue as any_overdue
from pipeline.host.held import hold_notice
from pipeline.store import pg_pipeline
from pipeline.support import clock

PENDING, FAILED, LATE, UNCERTAIN = "pending", "failed", "late", "uncertain"


def tracked_columns() -> tuple[Column[Any], ...]:
    """The columns the tracker owns, last in every tracked table (after its own columns)."""
    return (
        Column("trace_id", String(255), nullable=False),
        Column("sent_ms", BigInteger, nullable=False),
        Column("deadline_ms", BigInteger, nullable=False, index=True),
        Column("state", String(16), nullable=False, index=True),  # pending | answered | failed
        Column("reason", String(64), nullable=True),
    )


@dataclass(frozen=True, kw_only=True)
class Tracked:
    """One kind of tracked send: where its rows live and what its timeout says.

    ``table`` is keyed by ``msg_id`` and ends with :func:`tracked_columns`; among its own
    columns are the two named here: ``owner`` (who sent it and gets the ``FAILED``) and
    ``about`` (the gid the ``FAILED`` is about), and ``host``: the host the send went to, whose
    gateway alone answers it ``INJECTED`` (NULL in a row written before it was kept: any).
    """

    name: str
    table: Table
    owner: str
    about: str
    answered: str  # the state an answer (INJECTED) moves a row to
    reason: str  # the timeout's reason code
    stage: str  # the FAILED body's stage
    describe: Callable[[Any], str]  # the FAILED's error text for an overdue row


class Sent(NamedTuple):
    """What a receipt's settle reads of its tracked send: its state, and the host it went to
    (None: not recorded, a row from before 0.13)."""

    state: str
    host: str | None


def track(session: Session, kind: Tracked, later: dbapi.Later | None = None, **row: Any) -> None:
    """Record one send as ``pending``, in the caller's (the send's) transaction. ``later``: the
    insert is kept there for the caller to send with its next statement (it must, before the
    commit), when it is a plain DB-API statement."""
    key = (kind.table, tuple(row))
    statement = _TRACK[key] if key in _TRACK else _track_statement(*key)
    if statement is None:  # a column default to fill in: SQLAlchemy's insert does that
        session.execute(insert(kind.table), {**row, "state": PENDING})
    elif later is not None:
        later.add(statement, (*row.values(), PENDING))
    else:
        dbapi.execute(session, statement, (*row.values(), PENDING)).close()


# A forward send writes its row on the send path: DB-API text, built once per table and set of
# columns (pipeline.host.dbapi), when every column left out has no default (a plain NULL).
_TRACK: dict[tuple[Table, tuple[str, ...]], dbapi.Statement | None] = {}


def _track_statement(table: Table, names: tuple[str, ...]) -> dbapi.Statement | None:
    columns = (*names, "state")
    statement: dbapi.Statement | None = None
    if (
        "state" not in names
        and set(columns) <= set(table.c.keys())
        and all(c.default is None and c.server_default is None
                for c in table.c if c.name not in columns)
    ):  # fmt: skip
        quoted = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("{p}" for _ in columns)
        statement = dbapi.Statement(f'INSERT INTO "{table.name}" ({quoted}) VALUES ({marks})')
    _TRACK[(table, names)] = statement
    return statement


# Built once per table (the compiled form is then cached): every INJECTED an inbox takes reads
# and settles its tracked send, on the pull path's hot loop.
_SETTLE: dict[Table, Any] = {}
_STATE_OF: dict[Table, Any] = {}
# the same for a whole batch of receipts: DB-API SQL text, one statement per table and batch
# size (SQLAlchemy's per-execution work on an expanding IN cost more than the statement)
_STATES_SQL = "SELECT msg_id, state, host FROM {table} WHERE msg_id IN ({ids})"
_SETTLE_SQL = "UPDATE {table} SET state = {p}, reason = {p} WHERE state = {p} AND msg_id IN ({ids})"
_RETURNING = " RETURNING msg_id"
_PLACEHOLDER = {"qmark": "?", "format": "%s", "pyformat": "%s"}
_sql_cache: dict[tuple[str, str, str, int], str] = {}
_CHUNK = 500


def _driver(conn: Connection, sql: str, params: Sequence[Any], *, rows: bool) -> Sequence[Any]:
    """Run ``sql`` on the connection's DB-API cursor, in the transaction SQLAlchemy began
    (``exec_driver_sql`` builds an execution context and a result object per call, several
    times the cost of these statements at a receipt or two per batch); its rows when ``rows``.
    A driver error is raised as SQLAlchemy raises it (wrapped, a disconnect invalidates)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params)
        return cursor.fetchall() if rows else []
    except Exception as exc:  # noqa: BLE001 - re-raised by SQLAlchemy, wrapped
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)
    finally:
        cursor.close()


def _sql(conn: Connection, template: str, table: Table, n: int) -> str:
    key = (template, table.name, conn.dialect.paramstyle, n)
    sql = _sql_cache.get(key)
    if sql is None:
        p = _PLACEHOLDER.get(conn.dialect.paramstyle)
        if p is None:
            raise ValueError(f"deadlines: unsupported DB-API paramstyle {conn.dialect.paramstyle}")
        ids = ", ".join([p] * n)
        sql = _sql_cache[key] = template.format(table=table.name, p=p, ids=ids)
    return sql


def settle(
    session: Session, kind: Tracked, msg_id: str, state: str, reason: str | None = None
) -> bool:
    """Move a pending row to ``state``; False when it was not pending (already settled)."""
    t = kind.table
    stmt = _SETTLE.get(t)
    if stmt is None:
        stmt = _SETTLE[t] = (
            update(t)
            .where(t.c.msg_id == bindparam("b_msg_id"), t.c.state == PENDING)
            .values(state=bindparam("b_state"), reason=bindparam("b_reason"))
        )
    result = session.execute(stmt, {"b_msg_id": msg_id, "b_state": state, "b_reason": reason})
    return bool(getattr(result, "rowcount", 0))


def mark_late(session: Session, kinds: Sequence[Tracked], msg_id: str) -> bool:
    """An answer came after the deadline's ``FAILED``: ``failed`` -> ``late``, so the store keeps
    that the FAILED was wrong (the chaos checker and an operator read it). True when marked."""
    marked = False
    for kind in kinds:
        t = kind.table
        result = session.execute(
            update(t).where(t.c.msg_id == msg_id, t.c.state == FAILED).values(state=LATE)
        )
        marked = marked or bool(getattr(result, "rowcount", 0))
    return marked


def mark_uncertain(session: Session, kinds: Sequence[Tracked], msg_id: str) -> str | None:
    """An ``INJECTED`` with stage ``uncertain`` came back (the recipient died between deciding
    to inject and recording it, ``host/inject_journal.py``): ``pending`` or ``failed`` ->
    ``uncertain``. Returns the state it moved from (``failed``: the deadline's FAILED came
    first and may have been wrong), None when there was nothing to move."""
    for kind in kinds:
        t = kind.table
        for before in (PENDING, FAILED):
            result = session.execute(
                update(t).where(t.c.msg_id == msg_id, t.c.state == before).values(state=UNCERTAIN)
            )
            if getattr(result, "rowcount", 0):
                return before
    return None


def state_of(session: Session, kind: Tracked, msg_id: str) -> str | None:
    sent = sent_of(session, kind, msg_id)
    return None if sent is None else sent.state


def sent_of(session: Session, kind: Tracked, msg_id: str) -> Sent | None:
    t = kind.table
    stmt = _STATE_OF.get(t)
    if stmt is None:
        stmt = _STATE_OF[t] = select(t.c.state, t.c.host).where(t.c.msg_id == bindparam("b_msg_id"))
    row = session.execute(stmt, {"b_msg_id": msg_id}).first()
    return None if row is None else _sent(row.state, row.host)


def _sent(state: Any, host: Any) -> Sent:
    return Sent(str(state), None if host is None else str(host))


def overdue(session: Session, kind: Tracked, now: int, limit: int = 500) -> list[Any]:
    t = kind.table
    query = select(t).where(t.c.state == PENDING, t.c.deadline_ms < now)
    return list(session.execute(query.order_by(t.c.deadline_ms).limit(limit)))


def answered(session: Session, kinds: Sequence[Tracked], msg_id: str) -> str | None:
    """The state of the tracked send ``msg_id`` under whichever kind tracks it, else None."""
    sent = tracked_send(session, kinds, msg_id)
    return None if sent is None else sent.state


def tracked_send(session: Session, kinds: Sequence[Tracked], msg_id: str) -> Sent | None:
    """The tracked send ``msg_id`` (its state and host) under whichever kind tracks it, else
    None."""
    for kind in kinds:
        sent = sent_of(session, kind, msg_id)
        if sent is not None:
            return sent
    return None


def states_of(
    conn: Connection, kinds: Sequence[Tracked], msg_ids: Iterable[str]
) -> Mapping[str, Sent | None]:
    """:func:`tracked_send` for many msgIds at once: one select per kind (and per 500 ids), every
    id in the answer (None: tracked under no kind). The inbox reads a batch's receipts so."""
    todo = list(dict.fromkeys(msg_ids))
    if todo and kinds and pg_pipeline.on_postgresql(conn):
        return _states_pg(conn, kinds, todo)
    found: dict[str, Sent | None] = {}
    for kind in kinds:
        if not todo:
            break
        for i in range(0, len(todo), _CHUNK):
            chunk = todo[i : i + _CHUNK]
            sql = _sql(conn, _STATES_SQL, kind.table, len(chunk))
            for msg_id, state, host in _driver(conn, sql, tuple(chunk), rows=True):
                found[str(msg_id)] = _sent(state, host)
        todo = [m for m in todo if m not in found]
    for msg_id in todo:
        found[msg_id] = None
    return found


_STATES_PG: dict[tuple[str, ...], str] = {}


def _states_pg(
    conn: Connection, kinds: Sequence[Tracked], ids: list[str]
) -> Mapping[str, Sent | None]:
    """:func:`states_of` on PostgreSQL: every kind's rows in one statement (the ids as one
    array, however many) on libpq's pipeline, where a select per kind on psycopg's cursor was a
    round trip each. Asked before the transaction's first statement (the inbox reads ahead
    before the batch's dedupe claim), it goes in that statement's round trip
    (:func:`pg_pipeline.lead`) and the answer is read when first looked at. A msgId is tracked
    under one kind; were it under two, the first kind's row is the answer, as the selects in
    turn give."""
    names = tuple(kind.table.name for kind in kinds)
    sql = _STATES_PG.get(names)
    if sql is None:
        sql = _STATES_PG[names] = " UNION ALL ".join(
            f"SELECT {n}, msg_id, state, host FROM {name} WHERE msg_id = ANY(%s)"
            for n, name in enumerate(names)
        )
    params = (ids,) * len(names)
    ahead = pg_pipeline.lead(conn, sql, params)
    if ahead is None:  # the transaction has begun: read now
        ahead = pg_pipeline.Lead(conn, sql, params)
        ahead.rows()
    return _States(ids, ahead.rows)


class _States(Mapping[str, "Sent | None"]):
    """``states_of``'s answer on PostgreSQL, its rows read when first looked at."""

    __slots__ = ("_found", "_ids", "_rows")

    def __init__(self, ids: list[str], rows: Callable[[], list[tuple[Any, ...]]]) -> None:
        self._ids, self._rows = ids, rows
        self._found: dict[str, Sent | None] | None = None

    def _all(self) -> dict[str, Sent | None]:
        found = self._found
        if found is None:
            found = {}
            for _, msg_id, state, host in sorted(self._rows(), key=lambda row: int(row[0])):
                found.setdefault(str(msg_id), _sent(state, host))
            for msg_id in self._ids:
                found.setdefault(msg_id, None)
            self._found = found
        return found

    def __getitem__(self, msg_id: str) -> Sent | None:
        return self._all()[msg_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


@dataclass(frozen=True, slots=True)
class Answer:
    """One ``INJECTED`` (``injected``) or ``FAILED`` about the tracked send ``msg_id``."""

    msg_id: str
    injected: bool
    reason: str


def settle_answer(
    session: Session, kinds: Sequence[Tracked], msg_id: str, *, injected: bool, reason: str
) -> None:
    """An ``INJECTED`` or ``FAILED`` about ``msg_id`` came back: settle it, whatever its kind
    (a msgId is tracked under one kind: the first that settles it ends the search)."""
    for kind in kinds:
        if settle(session, kind, msg_id, kind.answered if injected else FAILED, reason or None):
            return


def settle_answers(conn: Connection, kinds: Sequence[Tracked], answers: Sequence[Answer]) -> None:
    """:func:`settle_answer` for each answer in order, as few statements as that allows: one
    conditional update per kind, outcome and reason, each over every msgId it settles. Answers
    about one msgId apply in their order (the first moves it out of ``pending``, the others
    find it settled), so the rows end exactly as one call per answer leaves them."""
    rounds: list[list[Answer]] = []  # round r holds the (r+1)-th answer about each msgId
    seen: dict[str, int] = {}
    for answer in answers:
        r = seen.get(answer.msg_id, 0)
        seen[answer.msg_id] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(answer)
    for one_round in rounds:
        groups: dict[tuple[bool, str | None], list[str]] = {}
        for answer in one_round:
            groups.setdefault((answer.injected, answer.reason or None), []).append(answer.msg_id)
        for (injected, reason), ids in groups.items():
            _settle_many(conn, kinds, ids, injected=injected, reason=reason)


def _settle_many(
    conn: Connection,
    kinds: Sequence[Tracked],
    msg_ids: list[str],
    *,
    injected: bool,
    reason: str | None,
) -> None:
    todo = msg_ids
    if pg_pipeline.state(conn) is not None:  # PostgreSQL, writes sent with the COMMIT
        _settle_with_commit(conn, kinds, msg_ids, injected=injected, reason=reason)
        return
    for n, kind in enumerate(kinds):
        if not todo:
            return
        returning = n < len(kinds) - 1  # the ids a kind settled are not tried under the next
        template = _SETTLE_SQL + _RETURNING if returning else _SETTLE_SQL
        state = kind.answered if injected else FAILED
        settled: set[str] = set()
        for i in range(0, len(todo), _CHUNK):
            chunk = todo[i : i + _CHUNK]
            sql = _sql(conn, template, kind.table, len(chunk))
            result = _driver(conn, sql, (state, reason, PENDING, *chunk), rows=returning)
            settled.update(str(row[0]) for row in result)
        todo = [m for m in todo if m not in settled]


def _settle_with_commit(
    conn: Connection,
    kinds: Sequence[Tracked],
    msg_ids: list[str],
    *,
    injected: bool,
    reason: str | None,
) -> None:
    """:func:`_settle_many` in a transaction that sends its writes with its ``COMMIT``
    (:mod:`pipeline.store.pg_pipeline`): no round trip of its own. Every kind's update covers
    every id, with no ``RETURNING`` to narrow the next kind's: a msgId is tracked under one
    kind, so the other kinds' updates match no row, and the rows end as the narrowed ones do."""
    for kind in kinds:
        state = kind.answered if injected else FAILED
        for i in range(0, len(msg_ids), _CHUNK):
            chunk = msg_ids[i : i + _CHUNK]
            sql = _sql(conn, _SETTLE_SQL, kind.table, len(chunk))
            pg_pipeline.defer(conn, sql, [(state, reason, PENDING, *chunk)])


class Deadlines:
    """The maintenance duty: every overdue pending send of every kind becomes one ``FAILED``,
    held for its sender -- or, for a sender that takes delivery by inject (``injects(gid)``: a
    worker, which never drains held rows), handed to ``inject`` once the transaction committed."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        gateway_id: str,
        kinds: Sequence[Tracked],
        ttl_s: float = 86400.0,
        reads: sessionmaker[Session] | None = None,
        on_timeout: Mapping[str, Callable[[], object]] | None = None,
        injects: Callable[[str], bool] | None = None,
        inject: Callable[[Envelope], object] | None = None,
    ) -> None:
        self.injects = injects
        self.inject = inject
        self.sessions = sessions
        self.reads = reads or sessions
        self.gateway_id = gateway_id
        self.kinds = tuple(kinds)
        self.ttl_s = ttl_s
        self.on_timeout = dict(on_timeout or {})

    def tick(self, now_ms: int | None = None) -> int:
        """Settle what is overdue; returns how many FAILED were held or injected (a kept one
        not counted)."""
        now = clock.now_ms() if now_ms is None else now_ms
        with self.reads() as r:  # look first with a read: no write lock unless there is work
            due = [k for k in self.kinds if any_overdue(r, k.table, PENDING, now)]
        return sum(self._expire(kind, now) for kind in due)

    def _expire(self, kind: Tracked, now: int) -> int:
        held = 0
        to_inject: list[Envelope] = []
        with self.sessions.begin() as s:
            for row in overdue(s, kind, now):
                if not settle(s, kind, row.msg_id, FAILED, kind.reason):
                    continue
                failed = failed_receipt(
                    about=row.msg_id,
                    recipient=getattr(row, kind.about),
                    sender=self.gateway_id,
                    to=getattr(row, kind.owner),
                    reason=kind.reason,
                    error=kind.describe(row),
                    stage=kind.stage,
                    ttl_s=self.ttl_s,
                    trace_id=row.trace_id,
                )
                if self.inject is not None and self.injects is not None and self.injects(failed.to):
                    to_inject.append(failed)
                elif hold_notice(s, failed, now):
                    held += 1
                else:
                    continue  # kept: a notice with this id is already held
                if kind.name in self.on_timeout:
                    self.on_timeout[kind.name]()
        for notice in to_inject:  # after the commit: settled before its sender hears
            assert self.inject is not None
            self.inject(notice)
        return held + len(to_inject)
