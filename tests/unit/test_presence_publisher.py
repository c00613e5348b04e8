"""PresencePublisher (R-PRES-1): signed heartbeats for local gids and the host entry,
tombstones for all of them on stop -- checked by feeding its output to a RosterView."""

from __future__ import annotations

from typing import Any

from pipeline.presence import Gone, PresencePublisher, RosterView, SpawnProfile
from pipeline.presence.roles import Delivery as ConfigDelivery
from pipeline.presence.roles import Role as ConfigRole
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


def test_a_reaped_worker_departs_with_its_cause_and_the_roster_keeps_it() -> None:
    """R-PRES-6: a reaped worker's last record says why it left (``gone``), then its tombstone;
    the roster drops the binding and keeps the cause (a sender is told RECIPIENT_GONE). A
    departure without a cause (a leaving gateway's tombstones) keeps none; a new binding of the
    gid clears the cause."""
    f = Fleet()
    producer = ListProducer()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            clock_ms=lambda: f.now)  # fmt: skip
    pub.register("w1", role="worker", delivery="inject", groups=["crew"])
    pub.register("w2", role="worker", delivery="inject")
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    seen = 0

    def replay() -> None:
        nonlocal seen
        for rec in producer.records[seen:]:
            view.apply(topic=rec["topic"], key=rec["key"], headers=rec["headers"],
                       value=rec["value"])  # fmt: skip
        seen = len(producer.records)

    replay()
    f.now += 1
    pub.unregister("w1", gone=Gone.STOPPED)
    pub.unregister("w2")  # no cause: a plain tombstone
    last_two = [r["value"] is None for r in producer.records if r["key"] == b"w1"][-2:]
    assert last_two == [False, True], "the departure record, then the tombstone"
    replay()
    assert view.host_of("w1") is None and view.get("w1") is None
    assert [e.gid for e in view.members("crew")] == []
    gone = view.departed("w1")
    assert gone is not None and (gone.gone, gone.host) == (Gone.STOPPED, "a")
    assert view.departed("w2") is None and [e.gid for e in view.departures()] == ["w1"]
    assert not view.rejections
    f.now += 1
    pub.register("w1", role="worker", delivery="inject")  # the gid bound again
    replay()
    assert view.host_of("w1") == "a" and view.departed("w1") is None


def test_presence_v3_gone_field_reads_old_records_and_round_trips() -> None:
    """The ``gone`` field is optional with a default: a v2 record reads as no departure."""
    from pipeline import schemas
    from pipeline.presence import PresenceEntry

    rec = {"gid": "w1", "host": "a", "role": "worker", "delivery": "inject", "groups": [],
           "ts_ms": 1, "ttl_ms": 2, "profiles": [], "labels": {}}  # fmt: skip
    old = PresenceEntry.from_record(
        schemas.decode("presence", schemas.encode("presence", rec, version=2))
    )
    assert old.gone is None
    new = PresenceEntry.from_record(
        schemas.decode("presence", schemas.encode("presence", {**old.to_record(), "gone": "died"}))
    )
    assert new.gone is Gone.DIED


def test_a_fenced_gateway_stops_heartbeating_without_retracting_its_hosts_entries() -> None:
    """R-TOP-3 'a second gateway fails loudly': the fenced one no longer speaks for the host,
    so on its way out it must not tombstone the entries the gateway that fenced it announces
    (they read as departed -- UNKNOWN_RECIPIENT at senders -- until that one's next beat)."""
    f = Fleet()
    producer = ListProducer()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            clock_ms=lambda: f.now)  # fmt: skip
    pub.register("w1", role="worker", delivery="inject")
    pub.heartbeat()
    sent = len(producer.records)
    pub.stop(retract=False)
    assert producer.records[sent:] == []


def test_the_gateway_retracts_its_presence_on_stop_unless_it_was_fenced() -> None:
    """The composition root's stop hook: a clean stop or any other fatal error retracts; a
    ``FencedError`` (another gateway took the host id) does not."""
    from pipeline.errors import FencedError, StoreError
    from pipeline.gateway.loops import stop_presence
    from pipeline.gateway.service import Gateway

    calls: list[bool] = []

    class Presence:
        def stop(self, *, retract: bool = True, away_grace_s: float = 0.0) -> None:
            calls.append(retract)

    for fatal in (None, StoreError("disk"), FencedError("fenced by a second gateway")):
        gateway = Gateway(host="a", loops=[])
        gateway.fatal = fatal
        stop_presence(Presence(), gateway, 0.0)  # type: ignore[arg-type]
    assert calls == [True, True, False]
