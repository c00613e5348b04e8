"""Worker pools on the real broker, members as processes (R-POOL-1).

Every effect row carries the step's partition, member, start and end, so these tests check from
the store that no partition ran two steps at once and that no event took effect twice.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.pool.status import pool_status
from pipeline.pool.submit import submit
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name

from .pool_members import STOP_S, effects, events, settled, start_member

pytestmark = pytest.mark.kafka

FAST_GROUP = ("--session-timeout-ms", "6000")


def _pool(bootstrap: str, partitions: int) -> tuple[str, str]:
    pool = unique_name("pool").replace(".", "-")
    ensure_pool_topic(bootstrap, TopicNames(), pool, partitions=partitions)
    return pool, TopicNames().pool(pool)


def _lines(n: int, start: int = 0, keys: int = 64) -> list[str]:
    return [f'k{i % keys}\t{{"n": {i}}}' for i in range(start, start + n)]


def _no_overlap_per_partition(rows: list) -> dict[int, float]:
    """Asserts no two steps of one partition overlapped (whatever member ran them); returns the
    longest gap between consecutive steps per partition, in seconds."""
    by_part: dict[int, list] = defaultdict(list)
    for e in rows:
        by_part[e.partition].append(e)
    gaps: dict[int, float] = {}
    for p, steps in by_part.items():
        steps.sort(key=lambda e: e.started_ms)
        longest = 0.0
        for prev, nxt in itertools.pairwise(steps):
            assert nxt.started_ms >= prev.ended_ms, (
                f"partition {p}: {prev.member} ran until {prev.ended_ms} but "
                f"{nxt.member} started at {nxt.started_ms}"
            )
            longest = max(longest, (nxt.started_ms - prev.ended_ms) / 1000)
        gaps[p] = longest
    return gaps


def _handover_windows(rows: list) -> dict[str, tuple[int, int]]:
    """Per scale direction (``out``: a partition leaves ``m0``; ``in``: it comes back), the span
    from the earliest last step of a moved partition on its old member to the latest first step
    on its new member: the time during which some moved partition was not flowing."""
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    by_part: dict[int, list] = defaultdict(list)
    for e in rows:
        by_part[e.partition].append(e)
    for steps in by_part.values():
        steps.sort(key=lambda e: e.started_ms)
        for prev, nxt in itertools.pairwise(steps):
            if prev.member != nxt.member:
                way = "in" if nxt.member == "m0" else "out"
                spans[way].append((prev.ended_ms, nxt.started_ms))
    return {w: (min(a for a, _ in s), max(b for _, b in s)) for w, s in spans.items()}


@pytest.mark.slow
def test_a_step_longer_than_max_poll_interval_causes_no_rebalance(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-FAIL-2: slow processing must not trigger a rebalance. The member keeps
    polling while an 8 s step runs against a 6 s max.poll.interval.ms: the step runs once, is
    committed, and the member is never evicted (no duplicate run, no MAXPOLL in its log)."""
    pool, _topic = _pool(kafka.bootstrap, 2)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    m = start_member(
        tmp_path, pool, kafka.bootstrap, store, "m1", "--sleep", "8",
        "--max-poll-interval-ms", "6000", *FAST_GROUP,
    )  # fmt: skip
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 1),
            timeout_s=60,
            what="the member to join",
            interval_s=0.25,
        )
        ids = submit(kafka.bootstrap, TopicNames().pool(pool), ["a\tone", "b\ttwo", "a\tthree"])
        wait_until(
            lambda: len(effects(store)) == 3, timeout_s=90, what="three slow steps", interval_s=0.25
        )
        # each event's id is the msgId submit minted: a version-7 UUID, later ones no earlier
        assert sorted(e.event_id for e in effects(store)) == sorted(ids)
        assert all(uuid.UUID(hex=i).version == 7 for i in ids)
        assert [i[:12] for i in ids] == sorted(i[:12] for i in ids)
        st = pool_status(kafka.bootstrap, pool)
        assert st.total_lag == 0
        assert list(st.members) == ["m1"]
    finally:
        assert m.stop(STOP_S) == 0
    runs = [e for e in events(tmp_path) if e["kind"] == "start"]
    assert len(runs) == 3, runs  # nothing was redelivered: no eviction happened
    log = (tmp_path / "m1.log").read_text()
    assert "MAXPOLL" not in log and "max.poll.interval" not in log.lower(), log


@pytest.mark.slow
def test_kill_9_one_of_four_members_moves_its_partitions_with_no_duplicate_effect(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-FAIL-1 (a worker crashes mid-batch): the offset is committed only after
    processing, so the killed member's partitions move and its uncommitted records (at most
    --max-poll-records) are redelivered; the dedupe row and the stored result make the effect
    land once."""
    pool, topic = _pool(kafka.bootstrap, 8)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    args = ("--sleep", "0.2", "--max-poll-records", "6", *FAST_GROUP)
    members = {
        f"m{i}": start_member(tmp_path, pool, kafka.bootstrap, store, f"m{i}", *args)
        for i in range(4)
    }
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 4), timeout_s=90, what="four members", interval_s=0.25
        )
        total = 240
        submit(kafka.bootstrap, topic, _lines(total))
        wait_until(
            lambda: len(effects(store)) >= total // 3,
            timeout_s=120,
            what="a third done",
            interval_s=0.25,
        )
        victim = members.pop("m2")
        victim.kill9()
        wait_until(
            lambda: len(effects(store)) >= total,
            timeout_s=240,
            what="every effect",
            interval_s=0.25,
        )
        wait_until(
            settled(kafka.bootstrap, pool, 3), timeout_s=60, what="three members", interval_s=0.25
        )
        st = pool_status(kafka.bootstrap, pool)
        assert "m2" not in st.members
        assert st.total_lag == 0
    finally:
        for proc in members.values():
            proc.stop(STOP_S)
    rows = effects(store)
    per_event = Counter(e.event_id for e in rows)
    assert len(per_event) == total
    assert max(per_event.values()) == 1, "an event took effect twice"
    _no_overlap_per_partition(rows)
    log = events(tmp_path)
    started = Counter(str(e["event_id"]) for e in log if e["kind"] == "start")
    redelivered = sum(n - 1 for n in started.values())
    assert 1 <= redelivered <= 6, started.most_common(8)  # its uncommitted records, at most 6
    reused = sum(1 for e in log if e["kind"] in ("reused", "duplicate"))
    print(f"\nkill -9: redelivered {redelivered} (bound 6), reused/duplicate {reused}")


@pytest.mark.slow
def test_scale_one_to_four_and_back_under_load_cooperative_sticky(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """Scaling 1 -> 4 -> 1 under load with cooperative-sticky never runs one
    partition on two members at once (the revoke rule: a partition goes only after its
    in-flight step ended and its offset was committed) and applies no effect twice. Partitions
    that do not move keep flowing: while moved partitions are handed over (each direction's
    handover window, from the store's step times), the partitions m0 kept complete steps -- an
    eager (stop-the-world) rebalance would complete none there. The longest gap between steps
    per partition is printed (the rebalance's pause, measured)."""
    pool, topic = _pool(kafka.bootstrap, 8)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    args = ("--sleep", "0.25", "--assignment", "cooperative-sticky", *FAST_GROUP)
    first = start_member(tmp_path, pool, kafka.bootstrap, store, "m0", *args)
    extra = {}
    stop_load = threading.Event()
    sent = [0]

    def load() -> None:  # 16 records/s, under one member's capacity of 8 / 0.25 = 32/s
        while not stop_load.is_set():
            submit(kafka.bootstrap, topic, _lines(8, start=sent[0]))
            sent[0] += 8
            time.sleep(0.5)

    loader = threading.Thread(target=load, daemon=True)
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 1), timeout_s=60, what="m0 to join", interval_s=0.25
        )
        loader.start()
        time.sleep(3)
        for i in (1, 2, 3):
            extra[f"m{i}"] = start_member(tmp_path, pool, kafka.bootstrap, store, f"m{i}", *args)
        wait_until(
            settled(kafka.bootstrap, pool, 4), timeout_s=90, what="four members", interval_s=0.25
        )
        time.sleep(3)
        for name in list(extra):
            assert extra.pop(name).stop(STOP_S) == 0  # graceful: finish, commit, leave
        wait_until(
            settled(kafka.bootstrap, pool, 1),
            timeout_s=90,
            what="back to one member",
            interval_s=0.25,
        )
        time.sleep(2)
        stop_load.set()
        loader.join(timeout=30)
        wait_until(
            lambda: len(effects(store)) >= sent[0],
            timeout_s=120,
            what="every effect",
            interval_s=0.25,
        )
    finally:
        stop_load.set()
        for proc in extra.values():
            proc.stop(STOP_S)
        first.stop(STOP_S)
    rows = effects(store)
    per_event = Counter(e.event_id for e in rows)
    assert len(per_event) == sent[0]
    assert max(per_event.values()) == 1, "an event took effect twice"
    assert {e.member for e in rows} >= {"m0", "m1"}, "the scale-out never took work"
    gaps = _no_overlap_per_partition(rows)
    print("\nlongest gap per partition (s):", {p: round(g, 2) for p, g in sorted(gaps.items())})
    owners: dict[int, set[str]] = defaultdict(set)
    for e in rows:
        owners[e.partition].add(e.member)
    kept = {p for p, ms in owners.items() if ms == {"m0"}}
    assert kept and len(kept) < len(owners), f"cooperative-sticky kept/moved nothing: {owners}"
    windows = _handover_windows(rows)
    assert set(windows) == {"out", "in"}, windows
    for way, (lo, hi) in windows.items():
        flowing = [e for e in rows if e.partition in kept and lo < e.ended_ms < hi]
        print(
            f"scale-{way} handover {(hi - lo) / 1000:.2f} s: {len(flowing)} steps ended on {kept}"
        )
        assert flowing, f"partitions {kept} stalled during the scale-{way} handover {lo}..{hi}"


def test_a_member_started_ahead_joins_the_group_at_its_start_time(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """``fleet pool run --start-at T`` (the lab's outage replacements, docs/lab.md "The
    rejoin"): the process starts up and warms its store at once, but is not a group member
    before T; from T on it joins and runs steps. A SIGTERM while it waits stops it cleanly."""
    pool, topic = _pool(kafka.bootstrap, 2)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    join_at = time.time() + 12
    m = start_member(
        tmp_path, pool, kafka.bootstrap, store, "m1", "--sleep", "0",
        "--start-at", repr(join_at), *FAST_GROUP,
    )  # fmt: skip
    try:
        seen = None
        while seen is None:
            st = pool_status(kafka.bootstrap, pool)
            if st.members:
                seen = time.time()
            assert m.alive, (tmp_path / "m1.log").read_text()
            assert time.time() < join_at + 90, "the member never joined"
            time.sleep(0.25)
        assert seen >= join_at  # no member in the group before its start time
        submit(kafka.bootstrap, topic, ["a\tone", "b\ttwo"])
        wait_until(
            lambda: len(effects(store)) == 2, timeout_s=60, what="two steps", interval_s=0.25
        )
    finally:
        assert m.stop(STOP_S) == 0
    waiting = start_member(
        tmp_path, pool, kafka.bootstrap, store, "m2", "--sleep", "0",
        "--start-at", repr(time.time() + 3600), *FAST_GROUP,
    )  # fmt: skip
    log = tmp_path / "m2.log"  # started up: its SIGTERM handler is in place, it waits
    wait_until(
        lambda: "running" in log.read_text(), timeout_s=60, what="m2 to start up", interval_s=0.25
    )
    assert waiting.stop(STOP_S) == 0
    assert not pool_status(kafka.bootstrap, pool).members
