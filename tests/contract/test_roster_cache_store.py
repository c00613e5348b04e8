"""The gateway writes only the roster rows a heartbeat changed (``apply_changes``): what the
mirror holds afterwards is what a full rewrite (``replace_all``) would have left (docs/presence.md "Sending")."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from pipeline.host import roster_cache
from pipeline.store import make_engine, session_factory

Entry = roster_cache.RosterEntry
pytestmark = pytest.mark.postgres


def _mirror(engine) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:  # type: ignore[no-untyped-def]
    with engine.connect() as c:
        cache = roster_cache.roster_cache_table
        gone = roster_cache.roster_gone_table
        return (
            [tuple(r) for r in c.execute(select(cache).order_by(cache.c.gid))],
            [tuple(r) for r in c.execute(select(gone).order_by(gone.c.gid))],
        )


def _changed_then_rewritten(engine, before, after):  # type: ignore[no-untyped-def]
    with session_factory(engine).begin() as s:
        roster_cache.apply_changes(s, before, after)
    changed = _mirror(engine)
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, after)
    return changed, _mirror(engine)


def test_changes_leave_what_a_full_rewrite_leaves(store_url: str) -> None:
    before = [
        Entry("main-a", "A", "main", "pull", ("g1",), 100),
        Entry("w-1", "B", "worker", "inject", (), 200),
        Entry("w-2", "B", "worker", "inject", ("g1", "g2"), 300),
        Entry("w-9", "B", "worker", "inject", (), 0, "stopped"),
        Entry("w-8", "B", "worker", "inject", (), 0, "stopped"),
    ]
    after = [
        Entry("main-a", "A", "main", "pull", ("g1",), 150),  # renewed by a heartbeat
        Entry("w-1", "B", "worker", "inject", (), 0, "died"),  # reaped: binding -> departure
        Entry("w-2", "B", "worker", "inject", ("g2",), 300),  # left a group
        Entry("w-3", "C", "worker", "pull", (), 400),  # new
        Entry("w-8", "B", "worker", "inject", (), 0, "died"),  # its departure's cause changed
    ]  # w-9's departure is forgotten
    engine = make_engine(store_url)
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, before)
    changed, rewritten = _changed_then_rewritten(engine, before, after)
    assert changed == rewritten and len(changed[0]) == 3
    changed, rewritten = _changed_then_rewritten(engine, after, before)  # and back
    assert changed == rewritten
    with session_factory(engine).begin() as s:
        assert roster_cache.departed(s, "w-9") == ("B", "stopped")
        assert [e.gid for e in roster_cache.all_entries(s)] == ["main-a", "w-1", "w-2"]
    engine.dispose()


def test_state_row_is_updated_in_place(store_url: str) -> None:
    engine = make_engine(store_url)
    first = roster_cache.RosterState(horizon_ms=10, stale=False, why="", written_ms=1)
    second = roster_cache.RosterState(horizon_ms=None, stale=True, why="broker down", written_ms=2)
    for state in (first, second):
        with session_factory(engine).begin() as s:
            roster_cache.write_state(s, state)
        with session_factory(engine).begin() as s:
            assert roster_cache.read_state(s) == state
    with engine.connect() as c:
        assert len(list(c.execute(select(roster_cache.roster_state_table)))) == 1
    engine.dispose()
