"""The roster view (R-PRES-2): signed presence only, claimed host = signing host,
newest ts wins, TTL liveness, signed tombstones retract, and only the owner may retract."""

from __future__ import annotations

from typing import Any

from pipeline.envelope import Envelope, Kind, encode
from pipeline.envelope import reasons as r
from pipeline.presence import (
    Delivery,
    PresenceEntry,
    Role,
    RosterView,
    SpawnProfile,
    gateway_gid,
    presence_record,
    tombstone_record,
)
from tests.envelope_kit import Fleet


def entry(f: Fleet, gid: str, host: str, *, ts: int | None = None, **kw: Any) -> PresenceEntry:
    args: dict[str, Any] = {"role": Role.WORKER, "delivery": Delivery.INJECT, "ttl_ms": 30_000}
    args.update(kw)
    return PresenceEntry(gid=gid, host=host, ts_ms=f.now if ts is None else ts, **args)


def feed(f: Fleet, view: RosterView, e: PresenceEntry, *, signer: str | None = None) -> Any:
    key, headers, value = presence_record(e, signer=f.signers[signer or e.host], topics=f.topics)
    return view.apply(topic=f.topics.roster, key=key, headers=headers, value=value)


def make(f: Fleet) -> RosterView:
    return RosterView(verifier=f.verifier("b"), clock_ms=lambda: f.now)


def test_live_entry_is_visible_and_lapses_after_ttl() -> None:
    f = Fleet()
    view = make(f)
    assert feed(f, view, entry(f, "w1", "a", groups=("g1",))) is not None
    assert view.host_of("w1") == "a"
    assert [e.gid for e in view.members("g1")] == ["w1"]
    f.now += 30_001
    assert view.live_host("w1") is None and view.members("g1") == []
    assert view.host_of("w1") == "a", "the binding outlives liveness (authenticity)"
    assert [e.gid for e in view.entries(include_stale=True)] == ["w1"]


def test_liveness_is_judged_against_the_followers_horizon_not_the_clock() -> None:
    """R-PRES-3: silence the follower could not hear is no evidence of departure. While the
    horizon stands still (broker away), nobody lapses, however long; once the follower has read
    past ts + ttl without a newer heartbeat, the entry lapses."""
    f = Fleet()
    view = make(f)
    feed(f, view, entry(f, "w1", "a"))
    view.mark_current(f.now)
    f.now += 3 * 30_000  # an outage three TTLs long: the horizon did not move
    view.mark_stale(True, "all brokers down")
    assert view.live_host("w1") == "a" and [e.gid for e in view.entries()] == ["w1"]
    assert view.freshness().stale and view.freshness().why == "all brokers down"
    view.mark_current(f.now)  # caught up again, nothing new from w1 on the log
    view.mark_stale(False)
    assert view.live_host("w1") is None and view.host_of("w1") == "a"
    view.mark_current(f.now - 10)  # an older horizon never moves it back
    assert view.freshness().horizon_ms == f.now


def test_the_binding_changes_only_by_tombstone_or_newer_binding() -> None:
    f = Fleet()
    view = make(f)
    feed(f, view, entry(f, "w1", "a"))
    view.mark_current(f.now + 10 * 30_000)
    assert view.host_of("w1") == "a"
    feed(f, view, entry(f, "w1", "c", ts=f.now + 1))  # moved: a newer binding signed by c
    assert view.host_of("w1") == "c"
    key, headers, _ = tombstone_record(
        "w1", signer=f.signers["c"], ts_ms=f.now + 2, topics=f.topics
    )
    view.apply(topic=f.topics.roster, key=key, headers=headers, value=None)
    assert view.host_of("w1") is None


def test_presence_signed_by_another_host_is_rejected() -> None:
    f = Fleet()
    view = make(f)
    assert feed(f, view, entry(f, "w1", "a"), signer="c") is None
    assert view.host_of("w1") is None
    assert view.rejections[r.SIGNER_MISMATCH] == 1


def test_newest_ts_wins_and_old_heartbeats_never_override() -> None:
    f = Fleet()
    view = make(f)
    feed(f, view, entry(f, "w1", "a", ts=f.now))
    assert feed(f, view, entry(f, "w1", "c", ts=f.now - 5000)) is None  # older, from c
    assert view.host_of("w1") == "a"
    feed(f, view, entry(f, "w1", "c", ts=f.now + 1))  # moved to c (newer)
    assert view.host_of("w1") == "c"


def test_signed_tombstone_retracts_only_for_the_owner() -> None:
    f = Fleet()
    view = make(f)
    feed(f, view, entry(f, "w1", "a"))
    key, headers, value = tombstone_record(
        "w1", signer=f.signers["c"], ts_ms=f.now, topics=f.topics
    )
    assert value is None
    view.apply(topic=f.topics.roster, key=key, headers=headers, value=value)
    assert view.host_of("w1") == "a" and view.rejections[r.SIGNER_MISMATCH] == 1
    key, headers, value = tombstone_record(
        "w1", signer=f.signers["a"], ts_ms=f.now, topics=f.topics
    )
    view.apply(topic=f.topics.roster, key=key, headers=headers, value=value)
    assert view.host_of("w1") is None and view.entries(include_stale=True) == []


def test_gateway_entry_carries_profiles_and_makes_the_host_visible() -> None:
    f = Fleet()
    view = make(f)
    gw = entry(f, gateway_gid("a"), "a", role=Role.GATEWAY, delivery=Delivery.NONE,
               profiles=(SpawnProfile(name="claude", description="default"),))  # fmt: skip
    feed(f, view, gw)
    hosts = view.hosts()
    assert list(hosts) == ["a"] and hosts["a"] is not None
    assert hosts["a"].profiles[0].name == "claude"
    assert feed(f, view, entry(f, gateway_gid("c"), "a", role=Role.GATEWAY)) is None


def test_non_presence_and_unsigned_records_are_rejected_not_raised() -> None:
    f = Fleet()
    view = make(f)
    env = Envelope.new(kind=Kind.SEND, sender="w1", to="w1", ttl_s=30, now_ms=f.now)
    key, headers, value = encode(env, topic=f.topics.roster, signer=f.signers["a"])
    assert view.apply(topic=f.topics.roster, key=key, headers=headers, value=value) is None
    assert view.apply(topic=f.topics.roster, key=b"w1", headers=None, value=b"x") is None
    garbage = Envelope.new(kind=Kind.PRESENCE, sender="w1", to="w1", body=b"\x00\x01\x02",
                           ttl_s=30, now_ms=f.now)  # fmt: skip
    key, headers, value = encode(garbage, topic=f.topics.roster, signer=f.signers["a"])
    assert view.apply(topic=f.topics.roster, key=key, headers=headers, value=value) is None
    assert view.rejections == {r.UNKNOWN_KIND: 1, r.NOT_SIGNED: 1, r.SCHEMA_INVALID: 1}


def test_presence_keyed_by_another_gid_is_rejected() -> None:
    f = Fleet()
    view = make(f)
    _key, headers, value = presence_record(entry(f, "w1", "a"), signer=f.signers["a"],
                                          topics=f.topics)  # fmt: skip
    assert view.apply(topic=f.topics.roster, key=b"w2", headers=headers, value=value) is None
    assert view.rejections[r.TO_MISMATCH] == 1


def test_presence_with_an_unbounded_ttl_is_rejected() -> None:
    f = Fleet()
    view = make(f)
    assert feed(f, view, entry(f, "w1", "a", ttl_ms=365 * 86_400_000)) is None
    assert feed(f, view, entry(f, "w2", "a", ttl_ms=0)) is None
    assert view.rejections[r.TTL_TOO_LONG] == 2 and view.host_of("w1") is None
