"""PresencePublisher (seed 000 §8 step 5): signed heartbeats for local gids and the host entry,
tombstones for all of them on stop -- checked by feeding its output to a RosterView."""

from __future__ import annotations

from typing import Any

from pipeline.gateway.config import Delivery as ConfigDelivery
from pipeline.gateway.config import Role as ConfigRole
from pipeline.presence import PresencePublisher, RosterView, SpawnProfile
from tests.envelope_kit import Fleet


class ListProducer:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def produce(self, topic: str, **kw: Any) -> None:
        self.records.append({"topic": topic, **kw})

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


def test_heartbeat_then_stop_is_seen_then_retracted_by_a_roster() -> None:
    f = Fleet()
    producer = ListProducer()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            profiles=[SpawnProfile(name="claude")], clock_ms=lambda: f.now)  # fmt: skip
    pub.register("w1", role=ConfigRole.WORKER, delivery=ConfigDelivery.INJECT, groups=["ops"])
    pub.register("m1", role="main", delivery="pull")
    assert pub.heartbeat() == 3
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)

    def replay() -> None:
        for rec in producer.records:
            view.apply(topic=rec["topic"], key=rec["key"], headers=rec["headers"],
                       value=rec["value"])  # fmt: skip

    replay()
    assert {e.gid for e in view.entries()} == {"w1", "m1", "a._gateway"}
    assert view.hosts()["a"].profiles[0].name == "claude"  # type: ignore[union-attr]
    assert view.get("m1").delivery.value == "pull"  # type: ignore[union-attr]
    pub.unregister("m1")
    pub.stop()
    replay()
    assert view.entries(include_stale=True) == [] and not view.rejections
    tombstones = [r for r in producer.records if r["value"] is None]
    assert {r["key"] for r in tombstones} == {b"m1", b"w1", b"a._gateway"}
