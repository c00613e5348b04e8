"""Presence order by (incarnation, ts) (R-PRES-5; docs/presence.md "Order";
the ``clock-skew`` chaos scenario).

R-ENV-6 ("ts <= now + skew"): a clock off by less than ``clock_skew_s`` changes
nothing. Before incarnations, one host's records were ordered by ``ts`` alone, so a gateway
restarted with its clock behind lost to what its previous run wrote until its clock passed it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prometheus_client import CollectorRegistry

from pipeline import schemas
from pipeline.envelope import Envelope, Kind, encode
from pipeline.envelope import reasons as r
from pipeline.presence import (
    Delivery,
    Gone,
    PresenceEntry,
    PresencePublisher,
    Role,
    RosterView,
    presence_record,
    tombstone_record,
)
from pipeline.presence.metrics import PresenceMetrics
from pipeline.presence.model import INCARNATION_LABEL
from tests.envelope_kit import Fleet
from tests.unit.test_presence_publisher import ListProducer

SKEW_MS = 20_000  # behind, inside the default clock_skew_s (30 s)


def entry(f: Fleet, gid: str, host: str, *, ts: int, inc: int, **kw: Any) -> PresenceEntry:
    args: dict[str, Any] = {"role": Role.WORKER, "delivery": Delivery.INJECT, "ttl_ms": 30_000}
    args.update(kw)
    return PresenceEntry(gid=gid, host=host, ts_ms=ts, incarnation=inc, **args)


def feed(f: Fleet, view: RosterView, e: PresenceEntry) -> PresenceEntry | None:
    key, headers, value = presence_record(e, signer=f.signers[e.host], topics=f.topics)
    return view.apply(topic=f.topics.roster, key=key, headers=headers, value=value)


def tombstone(f: Fleet, view: RosterView, gid: str, host: str, *, ts: int) -> None:
    key, headers, _ = tombstone_record(gid, signer=f.signers[host], ts_ms=ts, topics=f.topics)
    view.apply(topic=f.topics.roster, key=key, headers=headers, value=None)


def make(f: Fleet) -> RosterView:
    view = RosterView(verifier=f.verifier("b"), clock_ms=lambda: f.now)
    view.mark_current(f.now)
    return view


def test_one_hosts_records_order_by_incarnation_then_ts() -> None:
    f = Fleet()
    view = make(f)
    t = f.now
    assert feed(f, view, entry(f, "w1", "a", ts=t, inc=1)) is not None
    assert feed(f, view, entry(f, "w1", "a", ts=t - 5_000, inc=1)) is None  # same run, older
    assert feed(f, view, entry(f, "w1", "a", ts=t - 5_000, inc=2)) is not None  # newer run
    assert feed(f, view, entry(f, "w1", "a", ts=t + 20_000, inc=1)) is None  # older run, any ts
    assert view.get("w1") == entry(f, "w1", "a", ts=t - 5_000, inc=2)
    assert view.superseded == {"ts": 1, "incarnation": 1}


def test_a_host_restarted_with_its_clock_behind_its_own_tombstone_is_live_at_once() -> None:
    """The ``clock-skew`` chaos scenario finding: a clean stop retracts at the true time, the next run's clock is
    20 s behind (inside clock_skew_s); its peers must see it as soon as its first record is read
    (before, only once its clock passed the last record of the previous run)."""
    f = Fleet()
    view = make(f)
    t = f.now
    for gid, role in (("w1", Role.WORKER), ("a._gateway", Role.GATEWAY)):
        delivery = Delivery.NONE if role is Role.GATEWAY else Delivery.INJECT
        feed(f, view, entry(f, gid, "a", ts=t, inc=7, role=role, delivery=delivery))
        tombstone(f, view, gid, "a", ts=t + 1)
        e = entry(f, gid, "a", ts=t + 2 - SKEW_MS, inc=8, role=role, delivery=delivery)
        assert feed(f, view, e) is not None
    assert view.live_host("w1") == "a" and view.hosts() == {"a": view.get("a._gateway")}


def test_a_host_killed_then_restarted_with_its_clock_behind_wins_at_once() -> None:
    """No tombstone (kill -9): the previous run's last heartbeat is still the binding, with a ts
    ahead of the new run's clock; the new run's records replace it at once (its groups too)."""
    f = Fleet()
    view = make(f)
    t = f.now
    feed(f, view, entry(f, "w1", "a", ts=t, inc=3, groups=("old",)))
    assert feed(f, view, entry(f, "w1", "a", ts=t - SKEW_MS, inc=4, groups=("new",))) is not None
    assert [e.gid for e in view.members("new")] == ["w1"] and view.members("old") == []


def test_a_reaped_workers_departure_does_not_hide_the_next_run() -> None:
    f = Fleet()
    view = make(f)
    t = f.now
    feed(f, view, dataclasses.replace(entry(f, "w1", "a", ts=t, inc=1), gone=Gone.STOPPED))
    tombstone(f, view, "w1", "a", ts=t)
    assert view.departed("w1") is not None
    assert feed(f, view, entry(f, "w1", "a", ts=t - SKEW_MS, inc=2)) is not None
    assert view.departed("w1") is None and view.live_host("w1") == "a"


def test_an_older_runs_late_record_neither_overrides_nor_resurrects() -> None:
    """A zombie (an older run of the host, e.g. a fenced twin) writes after the newer run."""
    f = Fleet()
    view = make(f)
    t = f.now
    feed(f, view, entry(f, "w1", "a", ts=t, inc=5, groups=("new",)))
    assert feed(f, view, entry(f, "w1", "a", ts=t + 1_000, inc=4, groups=("old",))) is None
    assert view.get("w1") is not None and view.get("w1").groups == ("new",)  # type: ignore[union-attr]
    tombstone(f, view, "w1", "a", ts=t + 2_000)  # the newer run retracts it
    assert feed(f, view, entry(f, "w1", "a", ts=t + 3_000, inc=4)) is None
    assert view.host_of("w1") is None, "an older run cannot bring back a retracted gid"
    assert view.superseded == {"incarnation": 2}
    # the same run may announce it again after its own tombstone, whatever its clock says
    assert feed(f, view, entry(f, "w1", "a", ts=t - 1_000, inc=5)) is not None
    assert view.incarnation_of("a") == 5 and view.incarnation_of("c") == 0


def test_records_without_an_incarnation_read_as_zero() -> None:
    """A mixed fleet during an upgrade: an older gateway's records carry no incarnation label
    (they read as 0), and an older gateway reads ours (the label is just a label to it)."""
    f = Fleet()
    view = make(f)
    t = f.now
    new = entry(f, "w1", "a", ts=t, inc=9, labels={"build": "x"})
    rec = new.to_record()
    assert rec["labels"] == {"build": "x", INCARNATION_LABEL: "9"}
    as_v3 = schemas.decode("presence", schemas.encode("presence", rec, version=3))
    assert as_v3["labels"][INCARNATION_LABEL] == "9", "a v3 reader decodes it"
    back = PresenceEntry.from_record(as_v3)
    assert back.incarnation == 9 and back.labels == {"build": "x"}
    old = entry(f, "w1", "a", ts=t, inc=0)
    assert INCARNATION_LABEL not in old.to_record()["labels"]
    feed(f, view, old)  # as an older gateway's record reads
    assert feed(f, view, entry(f, "w1", "a", ts=t - 1_000, inc=0)) is None, "ts, as before"
    assert feed(f, view, entry(f, "w1", "a", ts=t - SKEW_MS, inc=1)) is not None  # upgraded
    assert feed(f, view, entry(f, "w1", "a", ts=t + 1_000, inc=0)) is None  # downgraded: older


def test_across_hosts_the_incarnations_are_unrelated_and_ts_decides() -> None:
    f = Fleet()
    view = make(f)
    t = f.now
    feed(f, view, entry(f, "w1", "a", ts=t, inc=1_800_000_000))
    assert feed(f, view, entry(f, "w1", "c", ts=t + 1, inc=1)) is not None  # moved to c
    assert feed(f, view, entry(f, "w1", "a", ts=t - 1, inc=1_800_000_001)) is None
    assert view.host_of("w1") == "c"


def test_the_incarnation_is_signed_a_changed_one_is_refused() -> None:
    f = Fleet()
    view = make(f)
    e = entry(f, "w1", "a", ts=f.now, inc=1)
    key, headers, value = presence_record(e, signer=f.signers["a"], topics=f.topics)
    rec = e.to_record()
    forged = schemas.encode(
        "presence", {**rec, "labels": {INCARNATION_LABEL: str(1 << 40)}}, version=value[1]
    )
    assert forged != value
    assert view.apply(topic=f.topics.roster, key=key, headers=headers, value=forged) is None
    assert view.rejections == {r.SIG_INVALID: 1} and view.host_of("w1") is None
    for bad in ("-1", "7x", "", "1" * 19):  # signed by its host, but not a count
        body = schemas.encode("presence", {**rec, "labels": {INCARNATION_LABEL: bad}})
        env = Envelope.new(kind=Kind.PRESENCE, sender="w1", to="w1", body=body, ttl_s=30,
                           now_ms=f.now)  # fmt: skip
        key, headers, value = encode(env, topic=f.topics.roster, signer=f.signers["a"])
        assert view.apply(topic=f.topics.roster, key=key, headers=headers, value=value) is None
    assert view.rejections[r.SCHEMA_INVALID] == 4


def test_the_publisher_asks_for_its_incarnation_once_and_signs_it_into_every_record() -> None:
    f = Fleet()
    producer = ListProducer()
    asked: list[int] = []

    def take() -> int:
        asked.append(1)
        return 42

    registry = CollectorRegistry()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            clock_ms=lambda: f.now, incarnation=take,
                            metrics=PresenceMetrics(registry))  # fmt: skip
    assert asked == [], "not before the first record"
    pub.register("w1", role="worker", delivery="inject")
    pub.heartbeat()
    pub.unregister("w1", gone=Gone.DIED)
    view = make(f)
    for rec in producer.records:
        view.apply(topic=rec["topic"], key=rec["key"], headers=rec["headers"], value=rec["value"])
    assert asked == [1] and pub.incarnation == 42
    assert view.get("a._gateway").incarnation == 42  # type: ignore[union-attr]
    assert view.departed("w1").incarnation == 42  # type: ignore[union-attr]
    assert registry.get_sample_value("fleet_presence_incarnation") == 42


def test_a_gateway_outranked_by_a_twin_takes_a_higher_incarnation() -> None:
    """Two gateways with one host id (the ``twin-host`` chaos scenario): Kafka fences one; the survivor may
    have taken the lower incarnation (it joined the group last), and must not stay outranked by
    the fenced one's last records."""
    f = Fleet()
    producer = ListProducer()
    pub = PresencePublisher(producer=producer, signer=f.signers["a"], topics=f.topics,
                            clock_ms=lambda: f.now, incarnation=5)  # fmt: skip
    view = make(f)
    feed(
        f,
        view,
        entry(f, "a._gateway", "a", ts=f.now, inc=6, role=Role.GATEWAY, delivery=Delivery.NONE),
    )  # fmt: skip  (the twin's)
    assert not pub.outranked(5, lambda seen: 99), "not outranked by itself"
    assert pub.outranked(view.incarnation_of("a"), lambda seen: seen + 1)
    assert pub.incarnation == 7
    pub.heartbeat()
    rec = producer.records[-1]
    view.apply(topic=rec["topic"], key=rec["key"], headers=rec["headers"], value=rec["value"])
    assert view.get("a._gateway").incarnation == 7  # type: ignore[union-attr]
