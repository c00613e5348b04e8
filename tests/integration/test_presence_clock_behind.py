"""A gateway restarted with its clock behind, inside ``clock_skew_s`` (the ``clock-skew`` chaos scenario;
real broker, gateways as processes, the skewed one's wall clock offset as the chaos suite does
it: ``pipeline.chaos.skewed_clock.skew_env``; libfaketime stops librdkafka, see there).

R-ENV-6 envelope rule ``ts <= now + skew`` and R-PRES-2 (signed presence, the union roster):
a clock off by less than the tolerance changes nothing, so the restarted host is routable as soon
as its first presence record is read. Its records carry timestamps *older* than the ones its
previous run wrote; they win by the incarnation each start takes (docs/presence.md "Order").

Scaled so no assertion depends on speed: B's clock is 300 s behind with ``clock_skew_s`` = 600
and a 590 s presence TTL (the same proportions as 20 s inside 30), so ordering by ``ts`` alone
would hide the new run for five minutes, far beyond every bounded wait below.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.bootstrap.client import build_client
from pipeline.chaos.collect import held_count
from pipeline.chaos.gateway_process import GatewayProc
from pipeline.chaos.skewed_clock import skew_env, write_skew_shim
from pipeline.envelope import Kind
from pipeline.host.config import load_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence import PresenceEntry, RosterFollower, RosterView
from pipeline.support.clock import now_ms
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SKEW = "clock_skew_s = 600.0"
MAIN_A = '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
MAIN_B = '[[entities]]\ngid = "main-b"\nrole = "main"\ndelivery = "pull"\n'


@pytest.fixture
def procs() -> Iterator[list[GatewayProc]]:
    started: list[GatewayProc] = []
    yield started
    for p in started:
        p.stop()


def _roster_entry(fleet: Fleet, gid: str) -> PresenceEntry | None:
    """``gid`` as a roster view rebuilt from the topic now reads it (the production follower)."""
    topics = TopicNames(prefix=fleet.prefix)
    view = RosterView.build(trust=fleet.trust, topics=topics, skew_s=600)
    follower = RosterFollower(bootstrap=fleet.bootstrap, view=view, topics=topics)
    try:
        follower.catch_up(60)
    finally:
        follower.stop()
    return view.get(gid)


def test_a_gateway_restarted_with_its_clock_behind_is_live_at_once(
    kafka: BrokerHandle, tmp_path: Path, procs: list[GatewayProc]
) -> None:
    """Orderly stop (B tombstones its presence at the true time), restart 300 s behind: A sees
    main-b live and a send to it is accepted (not ``UNKNOWN_RECIPIENT``) and held at B. Then a
    kill -9 (no tombstone: the previous run's last heartbeat stays the binding, its ts ahead of
    the new clock) and a restart 450 s behind: the new run's records replace it at once."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    cfg_a = fleet.config_file("A", MAIN_A, extra=SKEW, presence_ttl_s=590.0)
    # away_grace_s = 0: this stop tombstones (as ``fleet gateway leave`` would), the case where
    # the restarted run's records must win although no binding is left to outrank
    cfg_b = fleet.config_file(
        "B", MAIN_B, extra=SKEW + "\naway_grace_s = 0\n", presence_ttl_s=590.0
    )
    b = GatewayProc(cfg_b, tmp_path / "B.log", name="B")
    procs += [GatewayProc(cfg_a, tmp_path / "A.log", name="A").start(), b.start()]
    client = build_client(load_config(cfg_a), signer=fleet.signers["A"])
    wait_until(lambda: client.knows("main-b"), timeout_s=120, what="main-b live in A's roster")
    first = _roster_entry(fleet, "main-b")
    assert first is not None and first.incarnation > 0

    assert b.stop() == 0, b.output()[-2000:]  # orderly: tombstones at the true time
    stopped_ms = now_ms()
    wait_until(lambda: client.binding("main-b") is None, timeout_s=60, what="B's tombstone at A")

    shim = write_skew_shim(tmp_path)
    b.env = skew_env(shim, -300)
    b.start()
    wait_until(b.ready, timeout_s=120, what="B (300 s behind) running")
    wait_until(
        lambda: client.knows("main-b"),
        timeout_s=60,
        what="main-b live at A after the skewed restart",
    )
    env = client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"behind")
    assert env.to == "main-b"
    store_b = load_config(cfg_b).store_url
    wait_until(lambda: held_count(store_b, "main-b") == 1, timeout_s=60, what="the REPLY held at B")
    second = _roster_entry(fleet, "main-b")
    assert second is not None and second.incarnation == first.incarnation + 1
    assert second.ts_ms < stopped_ms - 200_000, "B's records carry its clock, 300 s behind"

    b.kill9()  # no tombstone: the skewed run's last heartbeat stays on the roster
    b.env = skew_env(shim, -450)
    b.start()
    wait_until(b.ready, timeout_s=120, what="B (450 s behind) running")

    def third_run_read() -> bool:
        e = _roster_entry(fleet, "main-b")
        return e is not None and e.incarnation == first.incarnation + 2

    wait_until(third_run_read, timeout_s=60, what="the third run's records winning on the roster")
    third = _roster_entry(fleet, "main-b")
    assert third is not None and third.ts_ms < now_ms() - 400_000, "B's clock, 450 s behind"
    assert client.knows("main-b")
    client.send(sender="main-a", to="main-b", kind=Kind.REPLY, body=b"further behind")
    wait_until(
        lambda: held_count(store_b, "main-b") == 2, timeout_s=60, what="the second REPLY held at B"
    )
