"""A failing step in a worker pool on the real broker: retried in place, in order (R-RETRY-4
scenario 3, "a poison message blocks a partition": a retry limit with backoff, then per-key
quarantine or a dead letter with its reason, and order kept for the records behind it)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name

from .pool_members import STOP_S, effects, events, produce_to, settled, start_member

pytestmark = pytest.mark.kafka

ATTEMPTS = 4


@pytest.mark.parametrize("concurrency", ["partition", "key"])
def test_a_poison_step_is_retried_with_backoff_then_set_aside_and_the_rest_flows_in_order(
    kafka: BrokerHandle, tmp_path: Path, concurrency: str
) -> None:
    """R-FAIL-3 through ``fleet pool run``'s production path: the poison record runs
    exactly ``ATTEMPTS`` times (the retry budget), each attempt after the previous one's backoff,
    and is then set aside with its reason; every other record takes effect exactly once, and on
    the poison's partition none is applied before the poison record was decided (partition
    mode: in offset order)."""
    pool = unique_name("pool").replace(".", "-")
    ensure_pool_topic(kafka.bootstrap, TopicNames(), pool, partitions=2)
    topic = TopicNames().pool(pool)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    m = start_member(
        tmp_path, pool, kafka.bootstrap, store, "m1",
        "--handler", "pipeline.lab.step:run_step", "--concurrency", concurrency,
        "--retry", f"0.2:2:{ATTEMPTS}:0", "--session-timeout-ms", "6000",
    )  # fmt: skip
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 1),
            timeout_s=60,
            what="the member to join",
            interval_s=0.25,
        )
        ids = []
        for i in range(8):  # partition 0: offsets 0..7, the poison at offset 2
            body = {"step_s": 0.05, "poison": i == 2, "n": i}
            key = "poison" if i == 2 else f"k{i}"
            ids.append(produce_to(kafka.bootstrap, topic, 0, json.dumps(body), key=key))
        others = [produce_to(kafka.bootstrap, topic, 1, json.dumps({"step_s": 0.05}))]
        wait_until(
            lambda: len(effects(store)) == 8,
            timeout_s=90,
            what="the seven good records of partition 0 and the one of partition 1",
            interval_s=0.25,
        )
    finally:
        assert m.stop(STOP_S) == 0
    done = {e.event_id: e for e in effects(store)}
    assert set(done) == {*ids[:2], *ids[3:], *others}  # each once (a key per event id)
    log = events(tmp_path)
    tries = sorted(
        (e for e in log if e["event_id"] == ids[2] and e["kind"] == "error"),
        key=lambda e: int(str(e["start_ms"])),
    )
    assert len(tries) == ATTEMPTS, tries
    waits = [int(str(b["start_ms"])) - int(str(a["end_ms"])) for a, b in itertools.pairwise(tries)]
    assert all(w >= 200 * 2**i for i, w in enumerate(waits)), waits  # never before its backoff
    decided = int(str(tries[-1]["end_ms"]))
    if concurrency == "partition":  # behind the poison record, in offset order, after it
        behind = sorted((done[i] for i in ids[3:]), key=lambda e: e.started_ms)
        assert [e.event_id for e in behind] == ids[3:]
        assert all(e.started_ms >= decided for e in behind)
    with sa.create_engine(store).connect() as conn:  # set aside: its key quarantined
        rows = conn.execute(sa.text("SELECT key, reason FROM fleet_quarantine")).all()
    assert [(k, bool(r)) for k, r in rows] == [("poison", True)], rows


def test_a_poisons_retry_budget_holds_across_a_move_to_another_member(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-FAIL-3 ("a retry limit with backoff") held for the group, not one owner
    (the ``poison-rebalance`` chaos scenario found 9 and 13 attempts against a limit of 5 when the partition moved): member m1
    makes some attempts and stops; m2 is assigned the partition and makes only the rest, so the
    poison is attempted exactly ``ATTEMPTS`` times in all before its key is quarantined."""
    pool = unique_name("pool").replace(".", "-")
    ensure_pool_topic(kafka.bootstrap, TopicNames(), pool, partitions=1)
    topic = TopicNames().pool(pool)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    args = ("--handler", "pipeline.lab.step:run_step", "--retry", f"1.0:2:{ATTEMPTS}:0",
            "--session-timeout-ms", "6000")  # fmt: skip
    m1 = start_member(tmp_path, pool, kafka.bootstrap, store, "m1", *args)
    m2 = None
    try:
        wait_until(
            settled(kafka.bootstrap, pool, 1), timeout_s=60, what="m1 to join", interval_s=0.25
        )
        poison = produce_to(kafka.bootstrap, topic, 0, json.dumps({"step_s": 0.05, "poison": True}),
                            key="poison")  # fmt: skip

        def tries() -> list[dict[str, object]]:
            return [e for e in events(tmp_path) if e["event_id"] == poison and e["kind"] == "error"]

        wait_until(
            lambda: len(tries()) >= 2, timeout_s=60, what="two attempts on m1", interval_s=0.25
        )
        # orderly: its retry state is in the committed offset's metadata
        assert m1.stop(STOP_S) == 0
        m2 = start_member(tmp_path, pool, kafka.bootstrap, store, "m2", *args)
        with sa.create_engine(store).connect() as conn:

            def quarantined() -> bool:
                q = sa.text("SELECT count(*) FROM fleet_quarantine WHERE key = 'poison'")
                return bool(conn.execute(q).scalar())

            wait_until(
                quarantined, timeout_s=120, what="the poison's key quarantined", interval_s=0.25
            )
        done = tries()
        assert len(done) == ATTEMPTS, [(e["member"], e["start_ms"]) for e in done]
        assert {e["member"] for e in done} == {"m1", "m2"}
    finally:
        if m2 is not None:
            assert m2.stop(STOP_S) == 0
