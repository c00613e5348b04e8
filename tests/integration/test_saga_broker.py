"""Sagas on the real broker, participants killed -9 at random points (R-SAGA-1, sagas; scenario 5).

The orchestrator runs in this process; payments, inventory and the carrier run as processes of
``examples/saga_refund.py`` (the example is the code under test). While 60 refunds arrive in five waves, a random
participant is killed -9 and restarted, five times. Every saga must end Completed, Aborted (all
compensations applied once each) or in the human queue (an undo that keeps failing, retried with
backoff to its limit), and no action or compensation may apply twice.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from pipeline.bootstrap.sagas import DEFAULT_RETENTION
from pipeline.effects import SagaDefinition, SagaState, SagaStep, list_sagas, state_counts
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, unique_name

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import saga_refund  # noqa: E402

pytestmark = pytest.mark.kafka
FAIL_EVERY = 4  # the carrier refuses refunds whose index is a multiple of 4: they compensate
HUMAN_EVERY = 8  # ... and inventory's undo keeps failing for multiples of 8: the human queue


def _participant(name: str, db: str, bootstrap: str, prefix: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        str(ROOT / "examples" / "saga_refund.py"),
        "participant",
        name,
        "--store-url",
        db,
        "--bootstrap",
        bootstrap,
        "--prefix",
        prefix,
    ]
    if name == "carrier":
        args += ["--fail", "book_pickup", "--fail-every", str(FAIL_EVERY)]
    if name == "inventory":  # of the aborting sagas, every other one cannot be restocked back
        args += ["--fail-compensation", "restock", "--fail-every", str(HUMAN_EVERY)]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)  # what PYTHONPATH held stays (tests/external_login)
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sagas_survive_participants_killed_at_random(kafka: BrokerHandle, store_url: str) -> None:
    prefix = unique_name("sg").replace(".", "-")
    topics = saga_refund.topics_for(prefix)
    saga_refund.ensure_topics(kafka.bootstrap, topics)
    stop = threading.Event()
    ns = argparse.Namespace(store_url=store_url, bootstrap=kafka.bootstrap, prefix=prefix)
    saga_refund.ledger_counts(store_url)  # creates the tables before the processes race to
    orch = threading.Thread(target=saga_refund.run_role, args=("orchestrator", ns, stop))
    orch.start()
    procs = {n: _participant(n, store_url, kafka.bootstrap, prefix) for n in saga_refund.OWNERS}
    rng = random.Random(11)
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    try:
        ids: list[str] = []
        for wave in range(5):  # new sagas keep arriving, so every kill lands mid-work
            ids += saga_refund.start(store_url, prefix, 12, first=wave * 12)
            time.sleep(rng.uniform(0.2, 1.5))
            victim = rng.choice(sorted(procs))
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            procs[victim] = _participant(victim, store_url, kafka.bootstrap, prefix)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with sessions() as s:
                counts = state_counts(s)
            if not any(counts[st] for st in SagaState if st.pending):
                break
            time.sleep(0.5)
        with sessions() as s:
            sagas = {r.saga_id: r for r in list_sagas(s, limit=100)}
    finally:
        stop.set()
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
            p.wait()
        orch.join(timeout=30)
        engine.dispose()
    assert set(sagas) == set(ids)
    ledger = saga_refund.ledger_counts(store_url)
    assert set(ledger.values()) == {1}, {k: v for k, v in ledger.items() if v != 1}
    for saga_id, rec in sagas.items():
        index = int(saga_id.rsplit("-", 1)[-1])
        if index % HUMAN_EVERY == 0:
            # retried to the limit with backoff, then parked with its full state (scenario 5)
            assert rec.state == SagaState.HUMAN, rec
            assert rec.error is not None and rec.error.startswith("SAGA_COMPENSATION_EXHAUSTED")
            assert rec.compensations == 0
            assert not any(k[0] == saga_id and k[2] == "compensate" for k in ledger)
            assert ledger.get((saga_id, "hold_payment", "action")) == 1  # still held: a human's
        elif index % FAIL_EVERY == 0:
            assert rec.state == SagaState.ABORTED, rec
            assert rec.compensations == 2
            assert ledger.get((saga_id, "hold_payment", "compensate")) == 1
            assert ledger.get((saga_id, "restock", "compensate")) == 1
            assert (saga_id, "book_pickup", "action") not in ledger  # refused: rolled back
        else:
            assert rec.state == SagaState.COMPLETED, rec
            assert not any(k[0] == saga_id and k[2] == "compensate" for k in ledger)


APPROVAL = SagaDefinition(
    name="approved_refund",
    steps=(
        SagaStep(name="hold_payment", participant="payments"),
        SagaStep(name="manager", approval=True, deadline_s=1.5),
        SagaStep(name="restock", participant="inventory"),
    ),
)
# ap-2 waits an hour, so the test's approval can never lose a race against the 1.5 s deadline
PATIENT = SagaDefinition(
    name="patient_refund",
    steps=(APPROVAL.steps[0], SagaStep(name="manager", approval=True), APPROVAL.steps[2]),
)


def test_an_approval_that_never_comes_expires_and_compensates_on_the_broker(
    kafka: BrokerHandle, store_url: str
) -> None:
    """R-FAIL-6: at the deadline an expiry event is published and the hold undone."""
    from confluent_kafka import Consumer

    from pipeline.effects import SagaOrchestrator

    prefix = unique_name("ap").replace(".", "-")
    topics = saga_refund.topics_for(prefix)
    saga_refund.ensure_topics(kafka.bootstrap, topics)
    saga_refund.ledger_counts(store_url)
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    orch = SagaOrchestrator([APPROVAL, PATIENT], topics=topics)

    def ticker(_engine: object) -> object:
        def tick() -> None:
            with sessions.begin() as s:
                orch.tick(s)

        return tick

    procs = _saga_processes(
        kafka.bootstrap, store_url, orch, ("payments", "inventory"), ticker=ticker
    )
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,), kwargs={"tick_s": 0.2}) for p in procs]
    for t in threads:
        t.start()
    try:
        with sessions.begin() as s:
            orch.start(s, "ap-1", "approved_refund", {"saga_id": "ap-1"})
            orch.start(s, "ap-2", "patient_refund", {"saga_id": "ap-2"})
        deadline = time.monotonic() + 60
        approved = False
        while time.monotonic() < deadline:
            with sessions.begin() as s:
                if not approved:
                    approved = orch.decide(s, "ap-2", approved=True)
                recs = {r.saga_id: r for r in list_sagas(s)}
            if len(recs) == 2 and not any(r.state.pending for r in recs.values()):
                break
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        engine.dispose()
    assert approved
    assert recs["ap-1"].state == SagaState.ABORTED and recs["ap-1"].compensations == 1
    assert recs["ap-2"].state == SagaState.COMPLETED
    ledger = saga_refund.ledger_counts(store_url)
    assert ledger[("ap-1", "hold_payment", "compensate")] == 1
    assert ("ap-2", "hold_payment", "compensate") not in ledger
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": unique_name("g"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topics.events])
    kinds: list[str] = []
    end = time.monotonic() + 30
    while time.monotonic() < end and "approval.expired" not in kinds:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            body = json.loads(msg.value())
            if body["saga_id"] == "ap-1":
                kinds.append(body["kind"])
    consumer.close()
    assert "approval.requested" in kinds and "approval.expired" in kinds


def test_a_saga_process_purges_its_finished_sagas(kafka: BrokerHandle, tmp_path: Path) -> None:
    """Bounded stores (docs/store.md): the orchestrator's process purges a completed saga once
    ``sagas_finished_s`` has passed -- here 2 s, the shortest R-EFF-4 horizon allows over
    1 s saga topics and a 1 s replay window -- and counts it in its own registry."""
    from prometheus_client import CollectorRegistry

    from pipeline.effects import SagaOrchestrator
    from pipeline.effects.saga_tables import saga
    from pipeline.retention import RetentionConfig

    prefix = unique_name("sp").replace(".", "-")
    topics = saga_refund.topics_for(prefix)
    saga_refund.ensure_topics(kafka.bootstrap, topics)
    url = f"sqlite:///{tmp_path / 'saga.sqlite'}"
    saga_refund.ledger_counts(url)
    short = RetentionConfig(
        sagas_finished_s=2, saga_topic_s=1, replay_window_s=1, outbox_sent_s=1, every_s=0.3
    )
    orch = SagaOrchestrator([saga_refund.REFUND], topics=topics)
    registry = CollectorRegistry()
    procs = _saga_processes(
        kafka.bootstrap,
        url,
        orch,
        tuple(saga_refund.OWNERS),
        registry=registry,
        retention=short,
        participant_retention=None,  # the orchestrator's purge alone is under test
    )
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,), kwargs={"tick_s": 0.2}) for p in procs]
    for t in threads:
        t.start()
    engine = make_engine(url)
    sessions = session_factory(engine)
    purged = {"table": "fleet_saga"}
    try:
        with sessions.begin() as s:
            orch.start(s, "refund-1", "refund", {"saga_id": "refund-1"})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if registry.get_sample_value("fleet_store_rows_purged_total", purged) == 1.0:
                break
            time.sleep(0.2)
        with engine.connect() as conn:
            left = conn.execute(select(func.count()).select_from(saga)).scalar_one()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        engine.dispose()
    assert registry.get_sample_value("fleet_store_rows_purged_total", purged) == 1.0
    assert left == 0, "the completed saga's row is gone"
    ledger = saga_refund.ledger_counts(url)
    assert ledger == {("refund-1", step, "action"): 1 for step in saga_refund.OWNERS.values()}


def _saga_processes(
    bootstrap: str,
    url: str,
    orch: Any,
    participants: tuple[str, ...],
    *,
    participant_retention: Any = DEFAULT_RETENTION,
    **orchestrator: Any,
) -> list[Any]:
    """The orchestrator's process (``orchestrator``: more build_saga_process arguments) and one
    per participant of ``examples/saga_refund.py``, all on the store ``url``."""
    from pipeline.bootstrap.sagas import build_saga_process
    from pipeline.effects import ReplyHandler

    topics = orch.topics
    return [
        build_saga_process(
            bootstrap=bootstrap,
            store_url=url,
            role="orchestrator",
            handler=ReplyHandler(orch),
            topics=topics,
            **orchestrator,
        ),
        *(
            build_saga_process(
                bootstrap=bootstrap,
                store_url=url,
                role=name,
                handler=saga_refund.make_participant(name, topics),
                topics=topics,
                retention=participant_retention,
            )
            for name in participants
        ),
    ]
