"""What ``fleet top`` draws from one :class:`~pipeline.observability.fleet_view.FleetSnapshot`,
and the keys that change it (pure: no terminal, no I/O; ``tests/unit/cli/test_top_view.py``).

Keys: ``s`` next sort column of the entities, ``r`` reverse it, ``/`` type a filter (Enter
applies, Esc cancels; it matches host, gid and group names), ``h`` one host at a time or the
whole fleet, ``c`` clear the filter and the host, ``q`` quit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pipeline.observability.fleet_view import EntityRow, FleetSnapshot, HostRow

SORTS = ("host", "gid", "held", "in_flight", "injecting")
KEYS_HELP = "keys: s sort  r reverse  / filter  h host  c clear  q quit"


@dataclass
class TopState:
    sort: str = "host"
    reverse: bool = False
    filter: str = ""
    typing: str | None = None  # the filter being typed, until Enter
    host: str | None = None  # one host, or None: the whole fleet

    def key(self, key: str, hosts: list[str]) -> None:
        if self.typing is not None:
            if key in ("\r", "\n"):
                self.filter, self.typing = self.typing, None
            elif key == "\x1b":
                self.typing = None
            elif key in ("\x7f", "\b"):
                self.typing = self.typing[:-1]
            elif key.isprintable():
                self.typing += key
            return
        if key == "s":
            self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
            self.reverse = self.sort not in ("host", "gid")  # counts: biggest first
        elif key == "r":
            self.reverse = not self.reverse
        elif key == "/":
            self.typing = ""
        elif key == "h":
            order: list[str | None] = [None, *hosts]
            at = order.index(self.host) if self.host in order else 0
            self.host = order[(at + 1) % len(order)]
        elif key == "c":
            self.filter, self.host = "", None

    def shows(self, *names: str, host: str | None = None) -> bool:
        if self.host is not None and host is not None and host != self.host:
            return False
        return not self.filter or any(self.filter in n for n in names)


def _n(value: int | float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if digits else str(value)


def _state(h: HostRow) -> Text:
    if h.source in ("roster", "broker"):
        return Text(f"{h.source} only", style="dim")
    if h.error:
        return Text("unreadable", style="red")
    if h.stale:
        return Text(f"STALE ({h.why})" if h.why else "STALE", style="bold red")
    return Text("current", style="green")


def _sort_key(state: TopState, e: EntityRow) -> tuple[object, ...]:
    value = getattr(e, state.sort)
    if isinstance(value, str):
        return (value, e.host, e.gid)
    return (-1 if value is None else value, e.host, e.gid)


def render(snap: FleetSnapshot | None, state: TopState) -> RenderableType:
    if snap is None:
        return Text("fleet top: reading the fleet ...")
    at = datetime.fromtimestamp(snap.taken_at, tz=UTC).strftime("%H:%M:%S")
    broker = Text("broker ok", style="green") if snap.broker_ok else Text("broker DOWN", "red")
    title = Text.assemble(
        ("fleet top ", "bold"), f"{at} UTC  ", broker,
        f"  sort {state.sort}{' desc' if state.reverse else ''}",
        f"  filter {state.filter!r}" if state.filter else "",
        f"  host {state.host}" if state.host else "  all hosts",
        (f"  filter> {state.typing}_" if state.typing is not None else "", "bold yellow"),
    )  # fmt: skip
    parts: list[RenderableType] = [title, Text(KEYS_HELP, style="dim")]

    hosts = Table(title="hosts", title_justify="left", expand=False)
    for col in ("host", "state", "entities", "lag", "lag_s", "outbox", "oldest_s", "quarantined"):
        hosts.add_column(col, justify="left" if col in ("host", "state") else "right")
    for h in snap.hosts:
        if state.shows(h.host, host=h.host):
            hosts.add_row(h.host, _state(h), str(h.entities), _n(h.lag), _n(h.lag_seconds, 1),
                          _n(h.outbox_backlog), _n(h.outbox_oldest_age_s, 1),
                          _n(h.quarantined_keys))  # fmt: skip
    parts.append(hosts)

    ents = Table(title="entities", title_justify="left")
    for col in ("host", "gid", "role", "delivery", "live", "held", "in_flight", "injecting"):
        ents.add_column(
            col, justify="right" if col in ("held", "in_flight", "injecting") else "left"
        )
    rows = [e for e in snap.entities if state.shows(e.host, e.gid, host=e.host)]
    for e in sorted(rows, key=lambda e: _sort_key(state, e), reverse=state.reverse):
        ents.add_row(e.host, e.gid, e.role, e.delivery, "yes" if e.live else "no",
                     _n(e.held), _n(e.in_flight), _n(e.injecting))  # fmt: skip
    parts.append(ents)

    groups = Table(title="consumer groups", title_justify="left")
    for col in ("group", "lag", "lag_s", "status"):
        groups.add_column(col, justify="left" if col == "group" else "right")
    for g in snap.groups:
        if state.shows(g.group):
            style = "" if g.status == "OK" else "yellow"
            groups.add_row(g.group, str(g.lag), f"{g.lag_seconds:.1f}", Text(g.status, style))
    parts.append(groups)

    if snap.dlq is not None:
        d = snap.dlq
        parts.append(Text(f"dlq {d.topic}: {d.depth} records, oldest {_n(d.oldest_age_s, 1)} s",
                          style="red" if d.depth else ""))  # fmt: skip
    if snap.pools:
        pools = Table(title="pools", title_justify="left")
        for col in ("pool", "members", "lag"):
            pools.add_column(col)
        for p in snap.pools:
            if state.shows(p.pool, p.group, *p.members):
                pools.add_row(p.pool, ", ".join(p.members) or "-", str(p.lag))
        parts.append(pools)
    parts.extend(Text(err, style="yellow") for err in snap.errors[:5])
    return Group(*parts)
