"""Pool steps through ``pipeline.effects`` ``reserve()`` on the real broker (issues 10 and 11).

Members are processes (``python -m pipeline pool run``) sharing one store. A step's idempotency
key is its ``msgId``; its outcome is stored in ``fleet_idempotency`` (key class ``pool.<name>``)
and its lease renewed by the member's heartbeat while it runs. ``fleet pool status --store-url``
shows each member's in-flight steps from the lanes rows the heartbeats write.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.effects import KeyState
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.pool.status import pool_status
from pipeline.support.processes import spawn_fleet
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name

from .pool_members import (
    STOP_S,
    effects,
    events,
    produce_to,
    settled,
    start_member,
    step_keys,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

FAST_GROUP = ("--session-timeout-ms", "6000")


def _pool(bootstrap: str, partitions: int) -> tuple[str, str]:
    pool = unique_name("pool").replace(".", "-")
    ensure_pool_topic(bootstrap, TopicNames(), pool, partitions=partitions)
    return pool, TopicNames().pool(pool)


def _gated(gate: Path) -> tuple[str, str]:
    """A step that runs until the test opens ``gate``: "mid-step" without timing."""
    return ("--command", f"while [ ! -e {gate} ]; do sleep 0.05; done; echo stepped")


def _kinds(tmp: Path, event_id: str) -> list[tuple[str, str]]:
    return [(str(e["member"]), str(e["kind"])) for e in events(tmp) if e["event_id"] == event_id]


def test_a_step_moved_by_a_rebalance_replays_its_stored_outcome_and_runs_once(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-POOL-4 ("store the result against the event id and reuse it") across a rebalance: m1
    runs a step on each of two partitions (held open by a gate); m2 joins and cooperative-sticky
    moves one partition while its step runs; m1 gives it up after --revoke-wait 0.5 s but the
    step goes on and its heartbeat keeps the key's lease. m2 gets the record again and finds the
    key in progress; the gate opens; m2 replays m1's stored outcome: the step ran once, the
    effect landed once (by m2)."""
    pool, topic = _pool(kafka.bootstrap, 2)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    gate = tmp_path / "gate"
    args = (
        *_gated(gate), "--revoke-wait", "0.5", "--step-lease", "3",
        "--assignment", "cooperative-sticky", *FAST_GROUP,
    )  # fmt: skip
    m1 = start_member(tmp_path, pool, kafka.bootstrap, store, "m1", *args)
    m2 = None
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 1), timeout_s=60, what="m1 to join", interval_s=0.25
        )
        ids = [produce_to(kafka.bootstrap, topic, p, "{}") for p in (0, 1)]
        wait_until(
            lambda: set(step_keys(store, pool)) == set(ids),
            timeout_s=30,
            what="m1 to claim both",
            interval_s=0.25,
        )
        m2 = start_member(tmp_path, pool, kafka.bootstrap, store, "m2", *args)
        wait_until(
            settled(kafka.bootstrap, pool, 2), timeout_s=60, what="two members", interval_s=0.25
        )
        wait_until(
            lambda: any(e["member"] == "m2" for e in events(tmp_path)),
            timeout_s=60,
            what="m2 to get the moved record while its step still runs on m1",
            interval_s=0.25,
        )
        gate.touch()
        wait_until(
            lambda: len(effects(store)) == 2, timeout_s=90, what="both effects", interval_s=0.25
        )
    finally:
        for proc in (m1, m2):
            if proc is not None:
                assert proc.stop(STOP_S) == 0
    rows = effects(store)
    assert Counter(e.event_id for e in rows) == Counter(ids), "an effect is missing or twice"
    moved = [e for e in rows if e.member == "m2"]
    assert len(moved) == 1, f"no partition moved while its step ran: {rows}"
    assert moved[0].reused, "m2 ran the moved step again instead of replaying its outcome"
    for eid in ids:
        ran = [k for k in _kinds(tmp_path, eid) if k[1] == "ran"]
        assert ran == [("m1", "ran")], _kinds(tmp_path, eid)  # the step ran once, on m1
    assert ("m2", "reused") in _kinds(tmp_path, moved[0].event_id)
    keys = step_keys(store, pool)
    assert keys == {eid: (int(KeyState.SUCCEEDED), 1) for eid in ids}, keys  # no takeover


def test_a_member_killed_mid_step_is_taken_over_after_the_lease_with_one_effect(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-FAIL-1 (a worker crashes mid-step), under the lease: the partition's owner
    is killed -9 while its step runs (held open by a gate). Its partition moves to the other
    member after the session timeout (6 s), but the step key's lease (12 s, no longer renewed)
    still holds, so the survivor waits instead of running the step beside a holder it cannot
    prove dead; when the lease ends it takes the key over (attempt 2) and runs the step: one
    effect, one finished run."""
    pool, topic = _pool(kafka.bootstrap, 1)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    gate = tmp_path / "gate"
    args = (*_gated(gate), "--step-lease", "12", *FAST_GROUP)
    m1 = start_member(tmp_path, pool, kafka.bootstrap, store, "m1", *args)
    m2 = None
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 1), timeout_s=60, what="m1 to join", interval_s=0.25
        )
        m2 = start_member(tmp_path, pool, kafka.bootstrap, store, "m2", *args)
        wait_until(
            settled(kafka.bootstrap, pool, 2),
            timeout_s=60,
            what="m2 to join (idle)",
            interval_s=0.25,
        )
        owner = pool_status(kafka.bootstrap, pool).partitions[0].member
        victim, other = (m1, m2) if owner == "m1" else (m2, m1)
        eid = produce_to(kafka.bootstrap, topic, 0, "{}")
        wait_until(
            lambda: eid in step_keys(store, pool),
            timeout_s=30,
            what="the step's claim",
            interval_s=0.25,
        )
        victim.kill9()
        gate.touch()  # the survivor's run may finish now (the victim's orphaned shell ends too)
        wait_until(
            lambda: len(effects(store)) == 1, timeout_s=120, what="the effect", interval_s=0.25
        )
    finally:
        for proc in (m1, m2):
            if proc is not None and proc.alive:
                assert proc.stop(STOP_S) == 0
    survivor = "m2" if owner == "m1" else "m1"
    kinds = _kinds(tmp_path, eid)
    assert kinds[0] == (owner, "start") and (owner, "ran") not in kinds, kinds
    assert [k for k in kinds if k[1] in ("ran", "reused")] == [(survivor, "ran")], kinds
    (effect,) = effects(store)
    assert effect.member == survivor and not effect.reused
    assert step_keys(store, pool) == {eid: (int(KeyState.SUCCEEDED), 2)}  # taken over once
    assert other.exit_code == 0


def test_pool_status_shows_each_members_in_flight_steps(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """``fleet pool status`` shows in-flight steps per member, across processes: two
    members each run one 30 s step; status with --store-url reports one running step on each,
    with its age; once the steps end both show none."""
    pool, topic = _pool(kafka.bootstrap, 2)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    args = ("--sleep", "0", "--step-lease", "3", *FAST_GROUP)
    procs = [start_member(tmp_path, pool, kafka.bootstrap, store, m, *args) for m in ("a", "b")]
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 2), timeout_s=60, what="two members", interval_s=0.25
        )
        for p in (0, 1):
            produce_to(kafka.bootstrap, topic, p, '{"step_s": 30}')

        def both_running() -> bool:
            st = pool_status(kafka.bootstrap, pool, store_url=store)
            return all(
                (lanes := st.lanes.get(m)) is not None
                and lanes.running == 1
                and (lanes.oldest_running_s or 0) > 0
                for m in ("a", "b")
            )

        wait_until(
            both_running,
            timeout_s=30,
            what="status to show a running step on each",
            interval_s=0.25,
        )
        shown: dict[str, Any] = {}

        def cli_shows_both_running() -> bool:
            # the CLI is a fresh process: on a loaded machine its start alone takes seconds, so
            # it is asked until it answers while the steps still run (they hold 30 s each; the
            # first CLI answer used to land after two 8 s steps had ended)
            out = spawn_fleet(
                ["pool", "status", "--pool", pool, "--bootstrap", kafka.bootstrap,
                 "--store-url", store, "--json"], stdout=subprocess.PIPE,
            )  # fmt: skip
            body, _ = out.communicate(timeout=60)
            assert out.returncode == 0
            shown.update(json.loads(body)["lanes"])
            return {m: shown.get(m, {}).get("running") for m in ("a", "b")} == {"a": 1, "b": 1}

        wait_until(
            cli_shows_both_running,
            timeout_s=25,
            what="fleet pool status to show both steps",
            interval_s=0.25,
        )
        assert not effects(store), "the CLI must have seen the steps while they ran"
        wait_until(
            lambda: len(effects(store)) == 2,
            timeout_s=90,
            what="both steps to end",
            interval_s=0.25,
        )

        def idle() -> bool:
            st = pool_status(kafka.bootstrap, pool, store_url=store)
            return all(st.lanes[m].running == 0 for m in ("a", "b"))

        wait_until(idle, timeout_s=30, what="status to show the members idle", interval_s=0.25)
    finally:
        for proc in procs:
            assert proc.stop(STOP_S) == 0
    assert pool_status(kafka.bootstrap, pool, store_url=store).lanes == {}  # goodbyes
