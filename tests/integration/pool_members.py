"""Pool members as processes (``python -m pipeline pool run``) and what their store says."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from pipeline.errors import BrokerError
from pipeline.pool.status import PoolStatus, pool_status
from pipeline.pool.tables import effects_table
from pipeline.support.processes import FleetProcess

# a member's graceful stop (finish the step, commit, leave the group) on a loaded machine
STOP_S = 60.0


def start_member(
    tmp: Path, pool: str, bootstrap: str, store: str, member: str, *extra: str
) -> FleetProcess:
    """``fleet pool run`` as member ``member``, output to ``<tmp>/<member>.log``, the step
    events of every member to ``<tmp>/events.jsonl``; stop it with ``.stop(STOP_S)``."""
    args = [
        "pool", "run", "--pool", pool, "--bootstrap", bootstrap, "--store-url", store,
        "--member", member, "--events", str(tmp / "events.jsonl"), *extra,
    ]  # fmt: skip
    return FleetProcess(tmp / f"{member}.log", args, name=member).start()


@dataclass(frozen=True)
class Effect:
    event_id: str
    partition: int
    member: str
    started_ms: int
    ended_ms: int
    reused: bool


def effects(store: str) -> list[Effect]:
    engine = sa.create_engine(store)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(effects_table.name):
                return []
            rows = conn.execute(
                sa.select(
                    effects_table.c.event_id,
                    effects_table.c.partition,
                    effects_table.c.member,
                    effects_table.c.started_ms,
                    effects_table.c.ended_ms,
                    effects_table.c.reused,
                )
            ).all()
    finally:
        engine.dispose()
    return [Effect(*r) for r in rows]


def events(tmp: Path) -> list[dict[str, object]]:
    path = tmp / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by kill -9
    return out


def settled(bootstrap: str, pool: str, members: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            st: PoolStatus = pool_status(bootstrap, pool)
        except BrokerError:  # e.g. COORDINATOR_LOAD_IN_PROGRESS on a busy shared broker
            return False
        owned = sorted(p for ps in st.members.values() for p in ps)
        return (
            st.state == "STABLE"
            and len(st.members) == members
            and owned == sorted(r.partition for r in st.partitions)
        )

    return check


def produce_to(
    bootstrap: str, topic: str, partition: int, value: str, *, key: str | None = None
) -> str:
    """One record on ``partition`` with a fresh ``msgId`` (as ``fleet pool submit`` sets one)."""
    import uuid

    from confluent_kafka import Producer

    from pipeline.kafka.settings import producer_config

    msg_id = uuid.uuid4().hex
    producer = Producer(producer_config(bootstrap))
    producer.produce(
        topic,
        value=value.encode(),
        key=None if key is None else key.encode(),
        partition=partition,
        headers=[("msgId", msg_id.encode())],
    )
    if producer.flush(30):
        raise AssertionError("the broker did not confirm the record")
    return msg_id


def step_keys(store: str, pool: str) -> dict[str, tuple[int, int]]:
    """The pool's step keys in ``fleet_idempotency``: key -> (state, attempt)."""
    from pipeline.effects import idempotency

    engine = sa.create_engine(store)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(idempotency.c.idem_key, idempotency.c.state, idempotency.c.attempt).where(
                    idempotency.c.key_class == f"pool.{pool}"
                )
            ).all()
    finally:
        engine.dispose()
    return {str(k): (int(s), int(a)) for k, s, a in rows}
