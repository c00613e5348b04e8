"""Static membership of pool members (``fleet pool run --instance-id``) on the real broker:
R-POOL-6, a member restarted within its session keeps its assignment, and the other
partitions flow meanwhile.

Three witnesses that no rebalance happened: the group's assignment read with the AdminClient
(``fleet pool status``) is the same before and after; the surviving member's own
``fleet_consumer_rebalances_total`` does not move; and every effect in the store was made by
the member that owned its partition before the restart -- records that arrived on the restarted
member's partitions while it was down waited for it, none was taken over.
"""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.pool.status import pool_status
from pipeline.pool.submit import submit
from pipeline.support.processes import FleetProcess
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name

from .dlq_helpers import high_watermarks
from .pool_members import STOP_S, effects, settled, start_member

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# long enough that a restart (a new interpreter, imports, store, join) is well within it
SESSION = ("--session-timeout-ms", "45000")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rebalances(port: int) -> float:
    """The member's ``fleet_consumer_rebalances_total``, every kind summed."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("fleet_consumer_rebalances_total{")
    )


def _lines(n: int, start: int) -> list[str]:
    return [f'k{i % 32}\t{{"n": {i}}}' for i in range(start, start + n)]


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_a_static_member_restarted_within_its_session_keeps_its_partitions(
    kafka: BrokerHandle, tmp_path: Path, how: str
) -> None:
    """R-POOL-6: two static members on 6 partitions; m0 stops (SIGTERM, or kill -9) and starts
    again under the same instance id before its session ends. Its partitions are still its own,
    m1 never rebalanced, and m1's partitions kept flowing while m0 was away."""
    pool = unique_name("pool").replace(".", "-")
    ensure_pool_topic(kafka.bootstrap, TopicNames(), pool, partitions=6)
    topic = TopicNames().pool(pool)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    port = _free_port()

    def member(name: str, *extra: str) -> FleetProcess:
        return start_member(
            tmp_path, pool, kafka.bootstrap, store, name,
            "--instance-id", name, "--sleep", "0.05", *SESSION, *extra,
        )  # fmt: skip

    m0 = member("m0")
    m1 = member("m1", "--metrics-port", str(port))
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 2), timeout_s=90, what="two members", interval_s=0.25
        )
        before = pool_status(kafka.bootstrap, pool).members
        assert sorted(before) == ["m0", "m1"] and all(before.values()), before
        owner = {p: name for name, parts in before.items() for p in parts}
        submit(kafka.bootstrap, topic, _lines(60, 0))
        wait_until(lambda: len(effects(store)) >= 60, timeout_s=120, what="the first 60 effects")
        rebalances = _rebalances(port)
        assert rebalances >= 1, "m1 counted its first assignment"

        if how == "kill9":
            m0.kill9()
        else:
            assert m0.stop(STOP_S) == 0, m0.output()[-2000:]
        on_m0 = _by_owner(store, owner)["m0"]
        submit(kafka.bootstrap, topic, _lines(60, 60))  # arrives while m0 is away
        ends = high_watermarks(kafka.bootstrap, topic)
        m1_total = sum(n for p, n in ends.items() if owner[p] == "m1")
        wait_until(
            lambda: _by_owner(store, owner)["m1"] >= m1_total,
            timeout_s=120,
            what="m1's partitions to flow while m0 is away",
            interval_s=0.25,
        )
        assert _by_owner(store, owner)["m0"] == on_m0, "m0's records waited for m0"
        assert sum(ends.values()) - m1_total > on_m0, "some records arrived for m0 meanwhile"
        assert pool_status(kafka.bootstrap, pool).members == before, "still m0's, in its absence"

        m0.start()
        wait_until(lambda: len(effects(store)) >= 120, timeout_s=120, what="every effect")
        wait_until(
            settled(kafka.bootstrap, pool, 2), timeout_s=60, what="two members", interval_s=0.25
        )
        assert pool_status(kafka.bootstrap, pool).members == before
        assert _rebalances(port) == rebalances, "m1 saw a rebalance"
    finally:
        for proc in (m0, m1):
            proc.stop(STOP_S)
    rows = effects(store)
    assert len({e.event_id for e in rows}) == 120 and len(rows) == 120, "one effect per event"
    moved = [(e.event_id, e.partition, e.member) for e in rows if owner[e.partition] != e.member]
    assert moved == [], "an effect made by a member that did not own its partition"


def _by_owner(store: str, owner: dict[int, str]) -> Counter[str]:
    """Effects so far per owner (before the restart) of their partition."""
    return Counter(owner[e.partition] for e in effects(store))
