"""The gateway's roster, mirrored into the store so local clients resolve ``to`` offline.

``fleet send`` must succeed locally while the broker is down (it only writes the outbox), and
an unknown recipient must still be an immediate error: so the client resolves ``to`` -> host
from this table, which the gateway refreshes from its roster view.

The table holds every signed **binding** the gateway knows (live or lapsed; a tombstone removes
the row), and one state row with the follower's **horizon** and its STALE flag. A CLI process
cannot ask the follower, so it judges liveness from these: ``expires_ms >= horizon_ms``.
Routing accepts any known binding (an outage silences heartbeats, it does not remove anyone);
liveness is what ``knows``, broadcast membership and ``fleet roster --config`` show.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Integer,
    String,
    Table,
    delete,
    insert,
    select,
)
from sqlalchemy.orm import Session

from pipeline.store import metadata

from . import dbapi

roster_cache_table = Table(
    "fleet_roster_cache",
    metadata,
    Column("gid", String(255), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("role", String(32), nullable=False),
    Column("delivery", String(16), nullable=False),
    Column("groups", String(1024), nullable=False, default=""),
    Column("expires_ms", BigInteger, nullable=False),
)

roster_gone_table = Table(
    "fleet_roster_gone",
    metadata,
    Column("gid", String(255), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("cause", String(16), nullable=False),  # stopped | died (presence ``gone``)
)

roster_state_table = Table(
    "fleet_roster_state",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("horizon_ms", BigInteger, nullable=True),
    Column("stale", Boolean, nullable=False),
    Column("why", String(1024), nullable=False, default=""),
    Column("written_ms", BigInteger, nullable=False),
)


@dataclass(frozen=True, slots=True)
class RosterEntry:
    gid: str
    host: str
    role: str
    delivery: str
    groups: tuple[str, ...]
    expires_ms: int
    gone: str = ""  # a reaped worker's departure: why it left (then it is no binding)


@dataclass(frozen=True, slots=True)
class RosterState:
    """The follower's view as mirrored: horizon (None = judge by the clock), STALE flag, and when
    the gateway last wrote it (an old ``written_ms`` means the gateway itself is not running)."""

    horizon_ms: int | None
    stale: bool
    why: str
    written_ms: int

    def judge_ms(self, now: int) -> int:
        return now if self.horizon_ms is None else self.horizon_ms

    def is_live(self, entry: RosterEntry, now: int) -> bool:
        return entry.expires_ms >= self.judge_ms(now)


NO_STATE = RosterState(horizon_ms=None, stale=False, why="", written_ms=0)


def replace_all(session: Session, entries: Iterable[RosterEntry]) -> None:
    """The mirror becomes ``entries``: bindings, and departures (``gone`` set) apart."""
    session.execute(delete(roster_cache_table))
    session.execute(delete(roster_gone_table))
    entries = tuple(entries)
    rows, gone = list(_bindings(entries).values()), list(_departures(entries).values())
    if rows:
        session.execute(insert(roster_cache_table), rows)
    if gone:
        session.execute(insert(roster_gone_table), gone)


def apply_changes(
    session: Session, before: Iterable[RosterEntry], after: Iterable[RosterEntry]
) -> None:
    """The mirror goes from ``before`` (what it holds, as last written) to ``after``, writing only
    the rows that differ: a heartbeat renews one binding, so one row changes, not the table."""
    for table, old, new in (
        (roster_cache_table, _bindings(before), _bindings(after)),
        (roster_gone_table, _departures(before), _departures(after)),
    ):
        gone = [gid for gid in old if gid not in new]
        if gone:
            session.execute(delete(table).where(table.c.gid.in_(gone)))
        added = [row for gid, row in new.items() if gid not in old]
        if added:
            session.execute(insert(table), added)
        renew = _RENEW if table is roster_cache_table else _RENEW_GONE
        for gid, row in new.items():
            if gid in old and old[gid] != row:  # SET the row's other columns, WHERE its gid
                values = [v for k, v in row.items() if k != "gid"]
                dbapi.execute(session, renew, [*values, gid]).close()


def _bindings(entries: Iterable[RosterEntry]) -> dict[str, dict[str, object]]:
    return {
        e.gid: {
            "gid": e.gid,
            "host": e.host,
            "role": e.role,
            "delivery": e.delivery,
            "groups": ",".join(e.groups),
            "expires_ms": e.expires_ms,
        }
        for e in entries
        if not e.gone
    }


def _departures(entries: Iterable[RosterEntry]) -> dict[str, dict[str, object]]:
    return {e.gid: {"gid": e.gid, "host": e.host, "cause": e.gone} for e in entries if e.gone}


def departed(session: Session, gid: str) -> tuple[str, str] | None:
    """``(host, cause)`` when ``gid``'s last word was a departure (a reaped worker), else None
    (bound, never announced, or retracted without a cause, as a leaving gateway's are)."""
    row = dbapi.fetchone(session, _DEPARTED, (gid,))
    return None if row is None else (str(row[0]), str(row[1]))


def write_state(session: Session, state: RosterState) -> None:
    """The one state row (id 1): updated in place, inserted the first time."""
    values = {
        "horizon_ms": state.horizon_ms,
        "stale": state.stale,
        "why": state.why[:1024],
        "written_ms": state.written_ms,
    }
    t = roster_state_table
    cursor = dbapi.execute(session, _STATE_UPDATE, list(values.values()))
    done = cursor.rowcount
    cursor.close()
    if done != 1:
        session.execute(delete(t))
        session.execute(insert(t), [{"id": 1, **values}])


def read_state(session: Session) -> RosterState:
    row = dbapi.fetchone(session, _STATE, ())
    if row is None:
        return NO_STATE
    horizon_ms, stale, why, written_ms = row
    return RosterState(horizon_ms, bool(stale), why, written_ms)


def _entry(row: object) -> RosterEntry:
    return RosterEntry(
        row.gid,  # type: ignore[attr-defined]
        row.host,  # type: ignore[attr-defined]
        row.role,  # type: ignore[attr-defined]
        row.delivery,  # type: ignore[attr-defined]
        tuple(g for g in row.groups.split(",") if g),  # type: ignore[attr-defined]
        row.expires_ms,  # type: ignore[attr-defined]
    )


# Every send resolves its recipient here, in its own transaction: DB-API text on the session's
# cursor (pipeline.host.dbapi), not session.execute, whose overhead was most of a send's lookup.
_LOOKUP = dbapi.Statement(
    'SELECT gid, host, role, delivery, "groups", expires_ms FROM fleet_roster_cache WHERE gid = {p}'
)
_DEPARTED = dbapi.Statement("SELECT host, cause FROM fleet_roster_gone WHERE gid = {p}")
# the gateway's writes each heartbeat (a renewed binding) and each tick (the state row)
_RENEW = dbapi.Statement(
    'UPDATE fleet_roster_cache SET host = {p}, role = {p}, delivery = {p}, "groups" = {p},'
    " expires_ms = {p} WHERE gid = {p}"
)
_RENEW_GONE = dbapi.Statement(
    "UPDATE fleet_roster_gone SET host = {p}, cause = {p} WHERE gid = {p}"
)
_STATE_UPDATE = dbapi.Statement(
    "UPDATE fleet_roster_state SET horizon_ms = {p}, stale = {p}, why = {p}, written_ms = {p}"
    " WHERE id = 1"
)
_STATE = dbapi.Statement(
    "SELECT horizon_ms, stale, why, written_ms FROM fleet_roster_state ORDER BY id LIMIT 1"
)


class KnownBindings:
    """The bindings one process's sends resolved, kept while the mirror stays as it was.

    Sound only where every write of the mirror is made in this process and followed by
    :meth:`changed` once it committed: the gateway, whose maintenance is the mirror's one writer
    (``Maintenance.on_roster_written``). Its local socket's groups then read a recipient's row
    once per change of the mirror (a heartbeat renews a binding about once a second) instead of
    once per group: a statement, on PostgreSQL a round trip, on every group at 500 sends/s. A
    send resolved just before a change commits is ordered before that change, as it would be had
    its group run a moment earlier. Only bindings found are kept: an unknown recipient is looked
    up (and its departure read) every time."""

    __slots__ = ("_entries", "_generation", "_lock")

    def __init__(self) -> None:
        self._entries: dict[str, RosterEntry] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def get(self, gid: str) -> tuple[RosterEntry | None, int]:
        """``gid``'s kept binding (None: read the mirror), and the mirror's generation now."""
        generation = self._generation
        return self._entries.get(gid), generation

    def keep(self, entry: RosterEntry, generation: int) -> None:
        """Keep ``entry``, read from the mirror as of ``generation`` (dropped if it changed
        since: the row read may be the one the change replaced)."""
        with self._lock:
            if generation == self._generation:
                self._entries[entry.gid] = entry

    def changed(self) -> None:
        """The mirror's writer committed a change: forget every kept binding."""
        with self._lock:
            self._generation += 1
            self._entries.clear()


def lookup(session: Session, gid: str, now: int | None = None) -> RosterEntry | None:
    """The known binding of ``gid`` (live or not); with ``now``, only while live as of the
    mirrored horizon (``now`` when no horizon was mirrored)."""
    row = dbapi.fetchone(session, _LOOKUP, (gid,))
    if row is None:
        return None
    gid, host, role, delivery, groups, expires_ms = row
    entry = RosterEntry(
        gid, host, role, delivery, tuple(g for g in groups.split(",") if g), int(expires_ms)
    )
    if now is not None and not read_state(session).is_live(entry, now):
        return None
    return entry


def all_entries(session: Session) -> list[RosterEntry]:
    rows = session.execute(select(roster_cache_table).order_by(roster_cache_table.c.gid))
    return [_entry(r) for r in rows]


def hosts_with_group(session: Session, group: str, now: int) -> set[str]:
    """Hosts with a live member of ``group`` (judged against the mirrored horizon)."""
    state = read_state(session)
    return {e.host for e in all_entries(session) if group in e.groups and state.is_live(e, now)}


def live(session: Session, now: int) -> list[RosterEntry]:
    """Every entry live as of the mirrored horizon (``now`` when none was mirrored), by gid."""
    state = read_state(session)
    return [e for e in all_entries(session) if state.is_live(e, now)]
