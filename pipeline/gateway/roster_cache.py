"""The gateway's roster, mirrored into the store so local clients resolve ``to`` offline.

``fleet send`` must succeed locally while the broker is down (it only writes the outbox), and
an unknown recipient must still be an immediate error: so the client resolves ``to`` -> host
from this table, which the gateway refreshes from its live roster view.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, String, Table, delete, insert, select
from sqlalchemy.orm import Session

from pipeline.store import metadata

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


@dataclass(frozen=True, slots=True)
class RosterEntry:
    gid: str
    host: str
    role: str
    delivery: str
    groups: tuple[str, ...]
    expires_ms: int


def replace_all(session: Session, entries: Iterable[RosterEntry]) -> None:
    session.execute(delete(roster_cache_table))
    rows = [
        {
            "gid": e.gid,
            "host": e.host,
            "role": e.role,
            "delivery": e.delivery,
            "groups": ",".join(e.groups),
            "expires_ms": e.expires_ms,
        }
        for e in entries
    ]
    if rows:
        session.execute(insert(roster_cache_table), rows)


def lookup(session: Session, gid: str, now: int) -> RosterEntry | None:
    row = session.execute(select(roster_cache_table).where(roster_cache_table.c.gid == gid)).first()
    if row is None or row.expires_ms < now:
        return None
    return RosterEntry(
        row.gid,
        row.host,
        row.role,
        row.delivery,
        tuple(g for g in row.groups.split(",") if g),
        row.expires_ms,
    )


def hosts_with_group(session: Session, group: str, now: int) -> set[str]:
    hosts: set[str] = set()
    for row in session.execute(select(roster_cache_table)):
        if row.expires_ms >= now and group in row.groups.split(","):
            hosts.add(row.host)
    return hosts


def live(session: Session, now: int) -> list[RosterEntry]:
    """Every entry still within its TTL, by gid."""
    rows = session.execute(
        select(roster_cache_table)
        .where(roster_cache_table.c.expires_ms >= now)
        .order_by(roster_cache_table.c.gid)
    )
    return [
        RosterEntry(
            r.gid,
            r.host,
            r.role,
            r.delivery,
            tuple(g for g in r.groups.split(",") if g),
            r.expires_ms,
        )
        for r in rows
    ]
