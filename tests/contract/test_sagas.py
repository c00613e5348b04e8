"""Saga engine contract (R-SAGA, R-FAIL-5, R-FAIL-6): real SQL, participants in process.

Orchestrator, participants, idempotency store and outbox are the production classes; only the
transport is :func:`pipeline.effects.drain` (outbox rows handed straight to the handlers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session, sessionmaker

from pipeline.effects import (
    ReplyHandler,
    SagaDefinition,
    SagaMetrics,
    SagaOrchestrator,
    SagaState,
    SagaStep,
    SagaTopics,
    drain,
    list_sagas,
    state_counts,
)
from pipeline.outbox import RowStatus, outbox
from pipeline.store import make_engine, session_factory
from tests.contract.saga_kit import (
    REFUND,
    effect_counts,
    idem_store,
    kit_meta,
    participants,
    seeded_failures,
)

TOPICS = SagaTopics(prefix="t")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _engine(url: str) -> Engine:
    eng = make_engine(url)
    kit_meta.create_all(eng)
    return eng


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = _engine(store_url)
    yield eng
    eng.dispose()


def _handlers(orch: SagaOrchestrator, fails: Any) -> dict[str, Any]:
    handlers: dict[str, Any] = {TOPICS.replies: ReplyHandler(orch)}
    for p in participants(TOPICS, idem_store(), fails):
        handlers[TOPICS.commands(p.name)] = p
    return handlers


def _start(sessions: sessionmaker[Session], orch: SagaOrchestrator, ids: list[str], d: str) -> None:
    for saga_id in ids:
        with sessions.begin() as s:
            orch.start(s, saga_id, d, {"saga_id": saga_id})


def _events(engine: Engine) -> list[bytes]:
    with engine.connect() as conn:
        rows = conn.execute(select(outbox.c.value).where(outbox.c.topic == TOPICS.events))
        return [bytes(v) for (v,) in rows]


def test_seed_001_saga_numbers_through_the_engine(tmp_path: Any) -> None:
    """R-SAGA-1, worked numbers: 3 steps at p = 0.98 complete 0.941192, compensate 0.058016/saga.

    N = 2000 sagas, seeded RNG (deterministic). Standard errors: completion sqrt(p(1-p)/N) =
    0.00526; compensations per saga sd 0.3050/sqrt(N) = 0.00682. Asserted within 4 sigma.
    """
    engine = _engine(f"sqlite:///{tmp_path / 'numbers.sqlite'}")
    sessions = session_factory(engine)
    orch = SagaOrchestrator([REFUND], topics=TOPICS)
    n = 2000
    handlers = _handlers(orch, seeded_failures(seed=1987, p_success=0.98))
    ids = [f"s{i}" for i in range(n)]
    for chunk in range(0, n, 200):
        _start(sessions, orch, ids[chunk : chunk + 200], "refund")
        drain(sessions, handlers, limit=1_000_000)
    with sessions() as s:
        counts = state_counts(s)
        sagas = list_sagas(s, limit=n)
    assert counts[SagaState.COMPLETED] + counts[SagaState.ABORTED] == n
    completion = counts[SagaState.COMPLETED] / n
    comps = sum(r.compensations for r in sagas) / n
    p3 = 0.98**3
    mean_c = 0.0196 + 2 * 0.019208
    sd_c = math.sqrt(0.0196 + 4 * 0.019208 - mean_c**2)
    print(f"completion {completion:.4f} (0.9412), compensations/saga {comps:.4f} (0.0580)")
    assert abs(completion - p3) <= 4 * math.sqrt(p3 * (1 - p3) / n), completion
    assert abs(comps - mean_c) <= 4 * sd_c / math.sqrt(n), comps
    effects = effect_counts(engine)
    assert set(effects.values()) == {1}  # no action and no compensation ran twice
    assert sum(c for (_s, _n, ph), c in effects.items() if ph == "compensate") == sum(
        r.compensations for r in sagas
    )
    engine.dispose()


def test_failure_at_step_3_compensates_2_then_1_once_each(engine: Engine) -> None:
    sessions = session_factory(engine)
    orch = SagaOrchestrator([REFUND], topics=TOPICS)
    handlers = _handlers(orch, lambda name, phase, _p: name == "book_pickup" and phase == "action")
    _start(sessions, orch, ["r1"], "refund")
    drain(sessions, handlers)
    with sessions() as s:
        (rec,) = list_sagas(s)
    assert rec.state == SagaState.ABORTED and rec.compensations == 2
    assert [h[1] for h in rec.history if h[1].startswith("compensated")] == [
        "compensated restock",
        "compensated hold_payment",
    ]
    # every command and reply delivered again (the relay published twice): nothing changes
    with sessions.begin() as s:
        s.execute(update(outbox).values(status=int(RowStatus.PENDING)))
    drain(sessions, handlers)
    with sessions() as s:
        (again,) = list_sagas(s)
    assert (again.state, again.compensations) == (SagaState.ABORTED, 2)
    # the refused pickup's write rolled back with its savepoint; its stored failure stays
    assert effect_counts(engine) == {
        ("r1", "hold_payment", "action"): 1,
        ("r1", "restock", "action"): 1,
        ("r1", "restock", "compensate"): 1,
        ("r1", "hold_payment", "compensate"): 1,
    }


def test_a_compensation_that_keeps_failing_goes_to_the_human_queue(
    engine: Engine, store_url: str
) -> None:
    """R-FAIL-5: retried to a limit, then the human queue with its full state.

    The operator's side goes through ``fleet saga ls | show | retry | resolve``.
    """
    from typer.testing import CliRunner

    from pipeline.cli.main import app

    url = store_url
    sessions = session_factory(engine)
    orch = SagaOrchestrator([REFUND], topics=TOPICS)
    broken = {"on": True}

    def fails(name: str, phase: str, _p: Any) -> bool:
        if phase == "action":
            return name == "book_pickup"
        return name == "hold_payment" and broken["on"]

    handlers = _handlers(orch, fails)
    _start(sessions, orch, ["h1"], "refund")
    drain(sessions, handlers)
    with sessions() as s:
        (rec,) = list_sagas(s)
        assert state_counts(s)[SagaState.HUMAN] == 1
    assert rec.state == SagaState.HUMAN and rec.attempt == REFUND.max_compensation_attempts
    assert rec.error is not None and rec.error.startswith("SAGA_COMPENSATION_EXHAUSTED")
    assert rec.results == {"0": {"done": "hold_payment"}, "1": {"done": "restock"}}
    assert effect_counts(engine).get(("h1", "hold_payment", "compensate")) is None  # rolled back
    runner = CliRunner()
    out = runner.invoke(app, ["saga", "ls", "--store-url", url, "--state", "human", "--json"])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.output)
    assert listed["counts"]["human"] == 1 and [r["saga_id"] for r in listed["sagas"]] == ["h1"]
    out = runner.invoke(app, ["saga", "show", "h1", "--store-url", url])
    shown = json.loads(out.output)
    assert shown["state"] == "human" and not shown["pending"] and len(shown["history"]) >= 6
    broken["on"] = False
    out = runner.invoke(
        app,
        [
            "saga",
            "retry",
            "h1",
            "--store-url",
            url,
            "--prefix",
            "t",
            "--definitions",
            "tests.contract.saga_kit:REFUND",
        ],
    )
    assert out.exit_code == 0, out.output
    drain(sessions, handlers)
    with sessions() as s:
        (rec,) = list_sagas(s)
    assert rec.state == SagaState.ABORTED and rec.compensations == 2
    assert effect_counts(engine)[("h1", "hold_payment", "compensate")] == 1
    out = runner.invoke(app, ["saga", "resolve", "h1", "--store-url", url, "--note", "late"])
    assert out.exit_code == 1 and "SAGA_NOT_IN_HUMAN_QUEUE" in out.output


def test_a_failing_compensation_waits_its_backoff_before_each_retry(engine: Engine) -> None:
    """R-FAIL-5: compensations are retried to a limit -- here 1 s then 2 s apart
    (doubling), so a participant that is down is not hammered; nothing is sent before it is due,
    and the third failure moves the saga to the human queue."""
    sessions = session_factory(engine)
    clock = Clock()
    backing_off = SagaDefinition(
        name="refund",
        steps=REFUND.steps,
        max_compensation_attempts=3,
        compensation_backoff_s=1.0,
        compensation_backoff_max_s=60.0,
    )
    orch = SagaOrchestrator([backing_off], topics=TOPICS, clock=clock)
    tries: list[float] = []

    def fails(name: str, phase: str, _p: Any) -> bool:
        if phase == "compensate" and name == "restock":
            tries.append(clock.now)
            return True
        return phase == "action" and name == "book_pickup"

    handlers = _handlers(orch, fails)
    _start(sessions, orch, ["b1"], "refund")
    drain(sessions, handlers)
    assert len(tries) == 1
    for wait_s, expect_tries in ((0.999, 1), (0.001, 2), (1.999, 2), (0.001, 3)):
        clock.now += wait_s
        with sessions.begin() as s:
            orch.tick(s)
        drain(sessions, handlers)
        assert len(tries) == expect_tries, (wait_s, tries)
    assert [round(t - tries[0], 3) for t in tries] == [0.0, 1.0, 3.0]
    with sessions() as s:
        (rec,) = list_sagas(s)
    assert rec.state == SagaState.HUMAN and rec.deadline_ms is None
    clock.now += 3600
    with sessions.begin() as s:
        assert orch.tick(s) == 0, "nothing is retried out of the human queue by itself"


APPROVED_REFUND = SagaDefinition(
    name="approved_refund",
    steps=(
        SagaStep(name="hold_payment", participant="payments"),
        SagaStep(name="manager", approval=True, deadline_s=3600),
        SagaStep(name="restock", participant="inventory"),
    ),
)


def test_an_approval_that_never_comes_expires_and_compensates(engine: Engine) -> None:
    """R-FAIL-6: expires at its deadline, emits an expiry event, compensates holds."""
    sessions = session_factory(engine)
    clock = Clock()
    registry = CollectorRegistry()
    metrics = SagaMetrics(registry)
    orch = SagaOrchestrator([APPROVED_REFUND], topics=TOPICS, clock=clock, metrics=metrics)
    handlers = _handlers(orch, lambda *_a: False)
    _start(sessions, orch, ["a1", "a2"], "approved_refund")
    drain(sessions, handlers)
    with sessions() as s:
        assert {r.state for r in list_sagas(s)} == {SagaState.AWAITING_APPROVAL}
        assert all(r.state.pending for r in list_sagas(s))
    with sessions.begin() as s:
        assert orch.decide(s, "a2", approved=True)
        clock.now += 3599
        assert orch.expire_due(s) == 0
    clock.now += 2
    with sessions.begin() as s:
        assert orch.expire_due(s) == 1
        assert not orch.decide(s, "a1", approved=True)  # a late decision changes nothing
    drain(sessions, handlers)
    with sessions() as s:
        by_id = {r.saga_id: r for r in list_sagas(s)}
    assert by_id["a1"].state == SagaState.ABORTED and by_id["a1"].compensations == 1
    assert by_id["a2"].state == SagaState.COMPLETED
    assert effect_counts(engine)[("a1", "hold_payment", "compensate")] == 1
    assert any(b'"approval.expired"' in v and b'"a1"' in v for v in _events(engine))
    with sessions() as s:
        metrics.observe_store({k.value: v for k, v in state_counts(s).items()})
    sample = registry.get_sample_value
    assert sample("fleet_saga_approvals_expired_total", {"definition": "approved_refund"}) == 1
    assert sample("fleet_saga_compensations_total", {"definition": "approved_refund"}) == 1
    assert (
        sample("fleet_saga_finished_total", {"definition": "approved_refund", "state": "aborted"})
        == 1
    )
    assert sample("fleet_saga_sagas", {"state": "completed"}) == 1
    assert sample("fleet_saga_human_queue_depth") == 0


def test_resolve_takes_a_saga_out_of_the_human_queue(engine: Engine) -> None:
    sessions = session_factory(engine)
    orch = SagaOrchestrator([REFUND], topics=TOPICS)
    handlers = _handlers(orch, lambda name, phase, _p: name == "restock" or phase == "compensate")
    _start(sessions, orch, ["z1"], "refund")
    drain(sessions, handlers)
    with sessions.begin() as s:
        assert state_counts(s)[SagaState.HUMAN] == 1
        orch.resolve(s, "z1", note="refunded by hand")
    with sessions() as s:
        (rec,) = list_sagas(s)
    assert rec.state == SagaState.ABORTED and rec.history[-1][1].endswith("refunded by hand")
    assert any(b'"saga.human"' in v for v in _events(engine))
