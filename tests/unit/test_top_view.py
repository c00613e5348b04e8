"""``fleet top``'s keys and drawing, on a hand-built snapshot (no terminal, no broker)."""

from __future__ import annotations

from rich.console import Console

from pipeline.cli.top_view import SORTS, TopState, render
from pipeline.observability.fleet_view import (
    DlqRow,
    EntityRow,
    FleetSnapshot,
    GroupRow,
    HostRow,
    PoolRow,
)


def _host(name: str, **kw: object) -> HostRow:
    row: dict[str, object] = {
        "host": name, "source": "store", "stale": False, "why": "", "entities": 1, "lag": 0,
        "lag_seconds": 0.0, "outbox_backlog": 0, "outbox_oldest_age_s": None,
        "quarantined_keys": 0,
    }  # fmt: skip
    return HostRow(**(row | kw))  # type: ignore[arg-type]


def _entity(gid: str, host: str, held: int | None) -> EntityRow:
    return EntityRow(gid=gid, host=host, role="main", delivery="pull", live=True, held=held,
                     in_flight=0, injecting=0)  # fmt: skip


SNAP = FleetSnapshot(
    taken_at=0.0,
    broker_ok=True,
    hosts=[_host("A"), _host("B", stale=True, why="roster follower cut off"),
           _host("C", source="roster", stale=None, outbox_backlog=None, quarantined_keys=None)],
    entities=[_entity("main-a", "A", 1), _entity("worker-b", "B", 7), _entity("w-c", "C", None)],
    groups=[GroupRow(group="fleet.gw.A", lag=3, lag_seconds=1.5, status="LAGGING")],
    pools=[PoolRow(pool="review", group="fleet.pool.review", members=["m1", "m2"], lag=4)],
    dlq=DlqRow(topic="fleet.dlq", depth=2, oldest_age_s=30.0),
)  # fmt: skip


def _screen(state: TopState) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(render(SNAP, state))
    return console.export_text()


def _entity_order(screen: str) -> list[str]:
    gids = ("main-a", "worker-b", "w-c")
    return [g for line in screen.splitlines() for g in gids if f" {g} " in line]


def test_the_screen_shows_every_part_of_the_snapshot() -> None:
    screen = _screen(TopState())
    assert "STALE (roster follower cut off)" in screen and "current" in screen
    assert "roster only" in screen
    assert "LAGGING" in screen and "fleet.gw.A" in screen
    assert "dlq fleet.dlq: 2 records, oldest 30.0 s" in screen
    assert "m1, m2" in screen
    assert _entity_order(screen) == ["main-a", "worker-b", "w-c"]  # by host


def test_s_sorts_by_the_next_column_biggest_count_first_and_r_reverses() -> None:
    state = TopState()
    state.key("s", [])
    assert state.sort == SORTS[1] == "gid" and not state.reverse
    state.key("s", [])
    assert state.sort == "held" and state.reverse
    assert _entity_order(_screen(state)) == ["worker-b", "main-a", "w-c"]
    state.key("r", [])
    assert _entity_order(_screen(state)) == ["w-c", "main-a", "worker-b"]


def test_slash_types_a_filter_that_enter_applies_and_escape_cancels() -> None:
    state = TopState()
    for key in "/work":
        state.key(key, [])
    assert state.typing == "work" and state.filter == ""
    assert "filter> work_" in _screen(state)
    state.key("\x7f", [])
    state.key("r", [])  # typed, not "reverse"
    state.key("\r", [])
    assert state.filter == "worr" and state.typing is None and not state.reverse
    state.key("/", [])
    state.key("x", [])
    state.key("\x1b", [])
    assert state.filter == "worr", "escape keeps the filter in force"
    state.filter = "worker"
    assert _entity_order(_screen(state)) == ["worker-b"]


def test_h_steps_through_one_host_at_a_time_and_c_clears() -> None:
    state = TopState()
    state.key("h", ["A", "B"])
    assert state.host == "A"
    screen = _screen(state)
    assert _entity_order(screen) == ["main-a"] and "host A" in screen
    state.key("h", ["A", "B"])
    state.key("h", ["A", "B"])
    assert state.host is None
    state.key("h", ["A", "B"])
    state.filter = "x"
    state.key("c", ["A", "B"])
    assert (state.host, state.filter) == (None, "")


def test_before_the_first_read_it_says_so() -> None:
    console = Console(width=80, record=True, color_system=None)
    console.print(render(None, TopState()))
    assert "reading the fleet" in console.export_text()
