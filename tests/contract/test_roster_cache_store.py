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


def test_a_restarted_gateway_keeps_the_last_runs_bindings_until_its_roster_caught_up(
    store_url: str,
) -> None:
    """R-PRES-7, a restart is not a departure: while the restarted gateway's roster replays the
    presence topic it knows only part of the fleet; its maintenance must not write that part
    over the bindings the previous run left, or local senders are refused UNKNOWN_RECIPIENT to
    every remote entity until the replay ends."""
    from prometheus_client import CollectorRegistry

    from pipeline.envelope import Signer
    from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
    from pipeline.gateway.maintenance import Maintenance
    from pipeline.gateway.metrics import GatewayMetrics
    from pipeline.host.conversations import Conversations
    from pipeline.host.held import HeldStore
    from pipeline.host.outbound import Publisher
    from pipeline.kafka.topics import TopicNames
    from pipeline.support.clock import now_ms

    far = now_ms() + 600_000
    last_run = [
        Entry("main-a", "A", "main", "pull", (), far),
        Entry("main-b", "B", "main", "pull", (), far),
    ]
    replaying = [Entry("main-a", "A", "main", "pull", (), far)]  # its own entry came back first
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        roster_cache.replace_all(s, last_run)
    view = {"entries": replaying, "ready": False}
    topics = TopicNames()
    maint = Maintenance(
        sessions=sessions, held=HeldStore(sessions), conversations=Conversations(sessions),
        dead_letters=OutboxDeadLetterSink(topics=topics, gateway="A", group="g"),
        publisher=Publisher(host="A", signer=Signer.generate("A"), topics=topics),
        metrics=GatewayMetrics(CollectorRegistry()), max_ttl_s=3600,
        roster_entries=lambda: view["entries"],
        roster_state=lambda: roster_cache.RosterState(now_ms(), True, "catching up", now_ms()),
        roster_ready=lambda: view["ready"],
    )  # fmt: skip
    maint.refresh_roster()
    with sessions.begin() as s:
        assert roster_cache.lookup(s, "main-b") is not None  # still resolvable
        assert roster_cache.read_state(s).why == "catching up"  # the state row is written
    view["ready"] = True  # caught up: the view is the fleet again, and now main-b is gone
    maint.refresh_roster()
    with sessions.begin() as s:
        assert roster_cache.lookup(s, "main-b") is None
        assert [e.gid for e in roster_cache.all_entries(s)] == ["main-a"]
    engine.dispose()


def test_the_gateway_s_sends_keep_a_binding_until_its_maintenance_changes_the_mirror(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-PRES-3 (a retracted binding is refused) with the bindings the gateway's local socket
    keeps (``KnownBindings``): a recipient's row is read once, not per group; the maintenance's
    commit of a changed mirror drops what was kept, so a binding gone from the roster is refused
    ``UNKNOWN_RECIPIENT`` at the next send. A tick that changes no binding keeps them."""
    from prometheus_client import CollectorRegistry

    from pipeline.envelope import Signer
    from pipeline.errors import DeliveryError
    from pipeline.gateway.client import GatewayClient, SendRequest
    from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
    from pipeline.gateway.maintenance import Maintenance
    from pipeline.gateway.metrics import GatewayMetrics
    from pipeline.host.conversations import Conversations
    from pipeline.host.held import HeldStore
    from pipeline.host.outbound import Publisher
    from pipeline.kafka.topics import TopicNames
    from pipeline.support.clock import now_ms

    far = now_ms() + 600_000
    fleet = [
        Entry("main-a", "A", "main", "pull", (), far),
        Entry("main-b", "B", "main", "pull", (), far),
    ]
    view = {"entries": fleet}
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    topics = TopicNames()
    publisher = Publisher(host="A", signer=Signer.generate("A"), topics=topics)
    bindings = roster_cache.KnownBindings()
    written: list[int] = []

    def on_written() -> None:
        written.append(1)
        bindings.changed()

    maint = Maintenance(
        sessions=sessions, held=HeldStore(sessions), conversations=Conversations(sessions),
        dead_letters=OutboxDeadLetterSink(topics=topics, gateway="A", group="g"),
        publisher=publisher, metrics=GatewayMetrics(CollectorRegistry()), max_ttl_s=3600,
        roster_entries=lambda: view["entries"],
        roster_state=lambda: roster_cache.RosterState(now_ms(), False, "", now_ms()),
        on_roster_written=on_written,
    )  # fmt: skip
    client = GatewayClient(sessions=sessions, publisher=publisher, bindings=bindings)
    reads: list[str] = []
    real = roster_cache.lookup
    monkeypatch.setattr(
        roster_cache, "lookup", lambda s, gid, *a: reads.append(gid) or real(s, gid, *a)
    )

    def send(body: bytes) -> object:
        (result,) = client.send_all([SendRequest(sender="main-a", to="main-b", body=body)])
        return result

    maint.refresh_roster()
    assert written == [1]  # the first write of the mirror
    for i in range(3):
        assert not isinstance(send(f"m{i}".encode()), Exception)
    assert reads == ["main-b"]  # read once, kept for the next groups
    maint.refresh_roster()  # nothing changed
    assert written == [1] and not isinstance(send(b"m3"), Exception) and reads == ["main-b"]
    view["entries"] = fleet[:1]  # main-b left the roster
    maint.refresh_roster()
    assert written == [1, 1]
    refused = send(b"late")
    assert isinstance(refused, DeliveryError) and refused.reason == "UNKNOWN_RECIPIENT"
    engine.dispose()
