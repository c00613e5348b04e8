"""``fleet top``'s snapshot: the exporter's sampler and per-host store views, joined."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.host.roster_cache import RosterEntry
from pipeline.kafka.topics import TopicNames
from pipeline.observability import LagSampler, SamplerConfig
from pipeline.observability.fleet_view import FleetReaders, HostSource
from pipeline.observability.store_reader import EntityCounts, HostStoreView
from tests.unit.observability.fakes import FakeReader

NOW = 1_700_000_000.0


@dataclass
class FakeStore:
    view: HostStoreView | None
    closed: bool = False

    def host_view(self, now_ms: int) -> HostStoreView:
        if self.view is None:
            raise OSError("disk gone")
        return self.view

    def close(self) -> None:
        self.closed = True


def _entry(gid: str, host: str, role: str = "worker") -> RosterEntry:
    return RosterEntry(gid, host, role, "inject", (), int(NOW * 1000) + 60_000)


def _readers(a: FakeStore, b: FakeStore, reader: FakeReader) -> FleetReaders:
    sampler = LagSampler(
        reader, SamplerConfig(groups_prefix="fleet.", dlq_topic="fleet.dlq"), clock=lambda: NOW
    )

    def members(groups: Sequence[str]) -> dict[str, list[str]]:
        return {g: ["m2", "m1"] for g in groups}

    return FleetReaders(
        sampler=sampler,
        hosts=[
            HostSource(host="A", reader=a, entities=(("main-a", "main", "pull"),)),  # type: ignore[arg-type]
            HostSource(host="B", reader=b),  # type: ignore[arg-type]
        ],
        topics=TopicNames(),
        members=members,
        clock=lambda: NOW,
    )


def _fake_reader() -> FakeReader:
    return FakeReader(
        committed={
            "fleet.gw.A": {("fleet.inbox.A", 0): 5},
            "fleet.pool.review": {("fleet.pool.review", 0): 1},
        },
        marks={("fleet.inbox.A", 0): (0, 8), ("fleet.pool.review", 0): (0, 1),
               ("fleet.dlq", 0): (0, 2)},
        stamps={("fleet.inbox.A", 0, 5): int((NOW - 4) * 1000), ("fleet.dlq", 0, 0): int((NOW - 30) * 1000)},
    )  # fmt: skip


def test_hosts_entities_lag_dlq_and_pools_in_one_snapshot() -> None:
    a = FakeStore(
        HostStoreView(
            stale=False, why="", roster=(_entry("main-a", "A", "main"), _entry("w-c", "C")),
            counts={"main-a": EntityCounts(held=2, in_flight=1, injecting=0)},
            quarantined_keys=1, outbox_backlog=3, outbox_oldest_created_at=NOW - 9,
        )
    )  # fmt: skip
    b = FakeStore(None)
    snap = _readers(a, b, _fake_reader()).snapshot()

    hosts = {h.host: h for h in snap.hosts}
    assert (hosts["A"].source, hosts["A"].stale, hosts["A"].lag, hosts["A"].lag_seconds) == (
        "store", False, 3, 4.0
    )  # fmt: skip
    assert (hosts["A"].outbox_backlog, hosts["A"].outbox_oldest_age_s) == (3, 9.0)
    assert hosts["B"].error.startswith("store: disk gone") and hosts["B"].stale is None
    assert hosts["C"].source == "roster" and hosts["C"].outbox_backlog is None
    assert any("B: store: disk gone" in e for e in snap.errors), "one bad store, not a blank view"

    ents = {e.gid: e for e in snap.entities}
    assert (ents["main-a"].held, ents["main-a"].in_flight, ents["main-a"].live) == (2, 1, True)
    assert ents["w-c"].held is None, "a host whose store was not read has no counts"

    assert snap.dlq is not None and (snap.dlq.depth, snap.dlq.oldest_age_s) == (2, 30.0)
    assert [(p.pool, p.members, p.lag) for p in snap.pools] == [("review", ["m2", "m1"], 0)]
    assert snap.as_json()["schema"] == 1


def test_a_configured_entity_missing_from_the_roster_shows_as_not_live() -> None:
    a = FakeStore(HostStoreView(stale=True, why="cut off", roster=()))
    snap = _readers(a, FakeStore(None), FakeReader()).snapshot()
    (main,) = [e for e in snap.entities if e.gid == "main-a"]
    assert (main.host, main.live, main.held) == ("A", False, 0)
    assert {h.host: h.stale for h in snap.hosts}["A"] is True


def test_with_a_broker_alone_hosts_come_from_their_gateway_groups() -> None:
    sampler = LagSampler(
        _fake_reader(), SamplerConfig(groups_prefix="fleet.", dlq_topic=None), clock=lambda: NOW
    )
    snap = FleetReaders(sampler=sampler, clock=lambda: NOW).snapshot()
    assert [(h.host, h.source, h.lag) for h in snap.hosts] == [("A", "broker", 3)]
    assert snap.entities == []
