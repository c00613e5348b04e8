"""A stop is not a departure (R-PRES-7, R-PRES-6): a SIGTERM stop announces the host's entities
*away* -- one signed record each, live for the grace, saying when they left -- not tombstones.
Peers keep the binding and the entry live until the grace ends, then it lapses as a crashed
host's would; a restarted run outranks it; leaving for good still tombstones."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline import schemas
from pipeline.cli.roster_cmd import liveness
from pipeline.errors import ConfigError, FencedError
from pipeline.gateway.loops import stop_presence
from pipeline.gateway.service import Gateway
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence import PresenceEntry, PresencePublisher, RosterView
from pipeline.presence.leave import bound_to, tombstone_all
from pipeline.presence.model import AWAY_LABEL, INCARNATION_LABEL
from tests.envelope_kit import Fleet
from tests.unit.test_presence_publisher import ListProducer

GRACE_S = 300.0


def _publisher(f: Fleet, producer: ListProducer, incarnation: int = 1) -> PresencePublisher:
    pub = PresencePublisher(
        producer=producer,
        signer=f.signers["a"],
        topics=f.topics,
        clock_ms=lambda: f.now,
        incarnation=incarnation,
    )
    pub.register("main-a", role="main", delivery="pull")
    pub.register("worker-a", role="worker", delivery="inject", groups=["ops"])
    return pub


def _replay(view: RosterView, records: list[dict[str, Any]]) -> None:
    for rec in records:
        view.apply(topic=rec["topic"], key=rec["key"], headers=rec["headers"], value=rec["value"])


def test_a_stop_with_a_grace_announces_away_and_the_entries_lapse_after_it() -> None:
    f = Fleet()
    producer = ListProducer()
    pub = _publisher(f, producer)
    pub.heartbeat()
    f.now += 2_000
    left_ms = f.now
    sent = len(producer.records)
    pub.stop(away_grace_s=GRACE_S)
    away = producer.records[sent:]
    assert all(r["value"] is not None for r in away), "no tombstone on a stop"
    assert {r["key"] for r in away} == {b"main-a", b"worker-a", b"a._gateway"}

    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    _replay(view, producer.records)
    assert not view.rejections
    entry = view.get("worker-a")
    assert entry is not None and entry.away_since_ms == left_ms
    assert entry.groups == ("ops",) and entry.ttl_ms == GRACE_S * 1000
    view.mark_current(left_ms + 60_000)  # a minute later: far past the heartbeat TTL, still away
    assert {e.gid for e in view.entries()} == {"main-a", "worker-a", "a._gateway"}
    assert view.live_host("main-a") == "a" and view.members("ops")
    view.mark_current(left_ms + int(GRACE_S * 1000) + 1)  # past the grace: lapsed, still bound
    assert view.entries() == [] and view.host_of("main-a") == "a"


def test_the_away_record_is_what_the_previous_release_reads_as_a_live_heartbeat() -> None:
    """The upgrade rule: presence v3 (what v0.12.0 writes and reads), a TTL within every
    reader's 600 s bound, and the time it left as a *label* (labels exist since v2; an older
    reader keeps it as a label and sees a live record until ``ts + grace``)."""
    f = Fleet()
    producer = ListProducer()
    _publisher(f, producer, incarnation=7).stop(away_grace_s=GRACE_S)
    rec = [r for r in producer.records if r["key"] == b"main-a"][-1]  # the away record
    verified = f.verifier("b").verify_presence(
        topic=f.topics.roster, key=rec["key"], headers=rec["headers"], value=rec["value"]
    )
    raw = verified.envelope.body
    body = schemas.decode("presence", raw)
    assert raw[1] == 3  # the writer's schema version
    assert body["ttl_ms"] <= 600_000 and body["gone"] is None
    assert body["labels"] == {INCARNATION_LABEL: "7", AWAY_LABEL: str(f.now)}


def test_a_restarted_run_outranks_its_away_records() -> None:
    f = Fleet()
    producer = ListProducer()
    _publisher(f, producer, incarnation=1).stop(away_grace_s=GRACE_S)
    f.now -= 5_000  # the restarted host's clock is even behind: the incarnation decides
    again = _publisher(f, producer, incarnation=2)
    again.heartbeat()
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    _replay(view, producer.records)
    entry = view.get("main-a")
    assert entry is not None and entry.away_since_ms is None and entry.incarnation == 2


def test_grace_zero_and_leaving_tombstone_and_a_fenced_gateway_writes_nothing() -> None:
    f = Fleet()
    producer = ListProducer()
    _publisher(f, producer).stop(away_grace_s=0)
    assert {r["key"] for r in producer.records if r["value"] is None} == {
        b"main-a",
        b"worker-a",
        b"a._gateway",
    }
    fenced = ListProducer()
    pub = _publisher(f, fenced)
    sent = len(fenced.records)
    pub.stop(retract=False, away_grace_s=GRACE_S)
    assert fenced.records[sent:] == []


def test_the_gateway_stop_hook_announces_away_unless_fenced() -> None:
    calls: list[tuple[bool, float]] = []

    class Presence:
        def stop(self, *, retract: bool = True, away_grace_s: float = 0.0) -> None:
            calls.append((retract, away_grace_s))

    for fatal in (None, FencedError("fenced by a second gateway")):
        gateway = Gateway(host="a", loops=[])
        gateway.fatal = fatal
        stop_presence(Presence(), gateway, GRACE_S)  # type: ignore[arg-type]
    assert calls == [(True, GRACE_S), (False, GRACE_S)]


def test_the_grace_is_configurable_and_bounded_by_what_readers_accept() -> None:
    assert GatewayConfig(host="a").away_grace_s == 300.0
    assert GatewayConfig(host="a", away_grace_s=0).away_grace_s == 0
    with pytest.raises(ConfigError, match="away_grace_s"):
        GatewayConfig(host="a", away_grace_s=601)
    with pytest.raises(ConfigError, match="away_grace_s"):
        GatewayConfig(host="a", away_grace_s=-1)


def test_leave_tombstones_every_gid_bound_to_the_host() -> None:
    """``fleet gateway leave``: the away records (and a spawned worker no config names) are
    retracted by tombstones signed by the host; another host's entries are untouched."""
    f = Fleet()
    producer = ListProducer()
    _publisher(f, producer).stop(away_grace_s=GRACE_S)
    other = PresencePublisher(producer=producer, signer=f.signers["b"], topics=f.topics,
                              clock_ms=lambda: f.now, incarnation=1)  # fmt: skip
    other.register("main-b", role="main", delivery="pull")
    other.heartbeat()
    view = RosterView.build(trust=f.trust, topics=f.topics, clock_ms=lambda: f.now)
    _replay(view, producer.records)

    class Follower:
        topics = f.topics

        def __init__(self) -> None:
            self.view = view

        def catch_up(self) -> int:
            return 0

    follower: Any = Follower()
    gids = bound_to(follower, "a")
    assert gids == ["main-a", "worker-a", "a._gateway"]
    out = ListProducer()
    tombstone_all(out, gids, signer=f.signers["a"], follower=follower, clock_ms=lambda: f.now)
    _replay(view, out.records)
    assert {e.gid for e in view.entries(include_stale=True)} == {"main-b", "b._gateway"}
    assert not view.rejections


def test_fleet_roster_says_away_and_since_when() -> None:
    e = PresenceEntry(gid="m", host="a", role="main", delivery="pull",  # type: ignore[arg-type]
                      ts_ms=1_000_000, ttl_ms=300_000, away_since_ms=1_000_000)  # fmt: skip
    assert liveness(e, True, 1_060_000).startswith("away since ")
    assert "(60 s, grace 240 s left)" in liveness(e, True, 1_060_000)
    assert liveness(e, False, 1_400_000).endswith("lapsed)")
    plain = PresenceEntry(gid="m", host="a", role="main", delivery="pull",  # type: ignore[arg-type]
                          ts_ms=1, ttl_ms=1)  # fmt: skip
    assert liveness(plain, True, 0) == "yes" and liveness(plain, False, 0) == "no"
