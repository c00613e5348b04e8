"""The refund saga of R-SAGA-1: payments, inventory and a carrier, each a participant process.

    python examples/saga_refund.py orchestrator --db URL --bootstrap HOST:PORT
    python examples/saga_refund.py participant payments --db URL --bootstrap HOST:PORT [--fail S]
    python examples/saga_refund.py start --db URL --count 10
    python examples/saga_refund.py demo --db URL --bootstrap HOST:PORT [--fail book_pickup]

``--fail STEP`` makes that step's action refuse (``hold_payment``, ``restock``, ``book_pickup``)
so the compensations run; ``--fail-compensation STEP`` makes an undo keep failing (human queue).
Each participant writes its effect to ``refund_ledger`` marked ``pending`` while the saga runs
(R-SAGA-1: such records are marked pending so readers treat them as provisional); ``fleet saga ls``
shows the sagas. All share one store here; in production each service owns its own.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select
from sqlalchemy.orm import Session

from pipeline.bootstrap.sagas import build_saga_process
from pipeline.cli.serving import serve_metrics
from pipeline.effects import (
    SAGA_KEY_CLASS,
    IdempotencyStore,
    KeyClass,
    Participant,
    ReplyHandler,
    SagaDefinition,
    SagaMetrics,
    SagaOrchestrator,
    SagaState,
    SagaStep,
    SagaTopics,
    StepFailed,
    state_counts,
)
from pipeline.store import make_engine, session_factory

ledger_meta = MetaData()
refund_ledger = Table(
    "refund_ledger",
    ledger_meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("saga_id", String(255), nullable=False),
    Column("step", String(64), nullable=False),
    Column("phase", String(16), nullable=False),
    Column("status", String(16), nullable=False),  # pending: provisional until the saga ends
)

REFUND = SagaDefinition(
    name="refund",
    steps=(
        SagaStep(name="hold_payment", participant="payments"),  # easy to undo first
        SagaStep(name="restock", participant="inventory"),
        SagaStep(name="book_pickup", participant="carrier"),  # hardest to undo last
    ),
    max_compensation_attempts=3,
)
OWNERS = {"payments": "hold_payment", "inventory": "restock", "carrier": "book_pickup"}


def topics_for(prefix: str) -> SagaTopics:
    return SagaTopics(prefix=prefix)


def make_participant(
    name: str,
    topics: SagaTopics,
    *,
    fail: str | None = None,
    fail_compensation: str | None = None,
    fail_every: int = 1,
) -> Participant:
    step = OWNERS[name]

    def act(phase: str, refuse: bool) -> Any:
        def run(session: Session, payload: dict[str, Any]) -> Any:
            session.execute(
                insert(refund_ledger).values(
                    saga_id=payload["saga_id"], step=step, phase=phase, status="pending"
                )
            )
            index = int(payload["saga_id"].rsplit("-", 1)[-1])
            if refuse and index % fail_every == 0:
                raise StepFailed(f"{step} {phase} refused (--fail switch)")
            return {"step": step, "phase": phase}

        return run

    store = IdempotencyStore(
        [KeyClass(name=SAGA_KEY_CLASS, retention_s=None, replay_window_s=None)]
    )
    return Participant(
        name,
        actions={step: act("action", fail == step)},
        compensations={step: act("compensate", fail_compensation == step)},
        idempotency=store,
        topics=topics,
    )


def make_orchestrator(topics: SagaTopics) -> SagaOrchestrator:
    return SagaOrchestrator([REFUND], topics=topics)


def run_role(
    role: str,
    args: argparse.Namespace,
    stop: threading.Event,
    registry: CollectorRegistry | None = None,
) -> None:
    """One saga process; it purges its own store (finished sagas, sent outbox rows, dedupe rows,
    expired keys: the default ``[retention]``) and counts everything in ``registry``."""
    topics = topics_for(args.prefix)
    registry = registry or CollectorRegistry()
    engine = make_engine(args.db)
    ledger_meta.create_all(engine)
    if role == "orchestrator":
        metrics = SagaMetrics(registry)
        orch = SagaOrchestrator([REFUND], topics=topics, metrics=metrics)
        sessions = session_factory(engine)

        def ticker(_engine: Any) -> Any:
            def tick() -> None:  # approvals past their deadline, and the store gauges
                with sessions.begin() as s:
                    orch.tick(s)
                    metrics.observe_store({k.value: v for k, v in state_counts(s).items()})

            return tick

        proc = build_saga_process(
            bootstrap=args.bootstrap,
            store_url=args.db,
            role=role,
            handler=ReplyHandler(orch),
            topics=topics,
            engine=engine,
            registry=registry,
            ticker=ticker,
        )
    else:
        handler = make_participant(
            role,
            topics,
            fail=args.fail,
            fail_compensation=args.fail_compensation,
            fail_every=args.fail_every,
        )
        proc = build_saga_process(
            bootstrap=args.bootstrap,
            store_url=args.db,
            role=role,
            handler=handler,
            topics=topics,
            engine=engine,
            registry=registry,
        )
    proc.run(stop)


def ensure_topics(bootstrap: str, topics: SagaTopics, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    names = [topics.replies, topics.events, *(topics.commands(p) for p in OWNERS)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=partitions) for n in names])
    for f in futures.values():
        try:
            f.result(timeout=30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def start(db: str, prefix: str, count: int, first: int = 0) -> list[str]:
    engine = make_engine(db)
    ledger_meta.create_all(engine)
    orch = make_orchestrator(topics_for(prefix))
    ids = [f"refund-{i}" for i in range(first, first + count)]
    with session_factory(engine).begin() as s:
        for saga_id in ids:
            orch.start(s, saga_id, "refund", {"saga_id": saga_id})
    engine.dispose()
    return ids


def ledger_counts(db: str) -> dict[tuple[str, str, str], int]:
    engine = make_engine(db)
    ledger_meta.create_all(engine)
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                refund_ledger.c.saga_id, refund_ledger.c.step, refund_ledger.c.phase, func.count()
            ).group_by(refund_ledger.c.saga_id, refund_ledger.c.step, refund_ledger.c.phase)
        )
        out = {(a, b, c): int(n) for a, b, c, n in rows}
    engine.dispose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("command", choices=["orchestrator", "participant", "start", "demo"])
    ap.add_argument("name", nargs="?", help="participant: payments | inventory | carrier")
    ap.add_argument("--db", required=True)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--prefix", default="example")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--fail", help="step whose action refuses")
    ap.add_argument("--fail-compensation", help="step whose compensation keeps failing")
    ap.add_argument(
        "--fail-every", type=int, default=1, help="fail only sagas with index %% N == 0"
    )
    ap.add_argument("--metrics-port", type=int, help="orchestrator/participant: serve /metrics")
    ap.add_argument("--metrics-address", default="127.0.0.1", help="where /metrics listens")
    args = ap.parse_args()
    stop = threading.Event()
    ensure_topics(args.bootstrap, topics_for(args.prefix))
    if args.command == "start":
        print("\n".join(start(args.db, args.prefix, args.count)))
    elif args.command in ("orchestrator", "participant"):
        role = "orchestrator" if args.command == "orchestrator" else args.name
        registry = CollectorRegistry()
        serve_metrics(registry, port=args.metrics_port, address=args.metrics_address)
        try:
            run_role(role, args, stop, registry)
        except KeyboardInterrupt:
            stop.set()
    else:
        roles = ["orchestrator", *OWNERS]
        threads = [
            threading.Thread(target=run_role, args=(r, args, stop), daemon=True) for r in roles
        ]
        for t in threads:
            t.start()
        start(args.db, args.prefix, args.count)
        engine = make_engine(args.db)
        deadline = time.time() + 60
        while time.time() < deadline:
            with session_factory(engine)() as s:
                counts = state_counts(s)
            if not any(counts[st] for st in SagaState if st.pending):
                break
            time.sleep(0.5)
        print({k.value: v for k, v in counts.items() if v})
        stop.set()
        for t in threads:
            t.join(timeout=10)


if __name__ == "__main__":
    main()
