"""Bad envelopes never escape the consumer loop (R-ENV-4: "any check
fails -> dead-letter with the reason, loud log, never a wedge"): the real consumer runtime on a
real broker, a handler that only calls ``decode``, and every failure lands as a dead letter
with its reason code while good records around it are applied."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline import schemas
from pipeline.envelope import Kind, Signer, decode, encode
from pipeline.envelope import reasons as r
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.runtime import ConsumerRuntime, Record, RuntimeConfig, Staged
from pipeline.runtime.context import FailureContext
from pipeline.runtime.outcomes import ACK, Outcome
from pipeline.runtime.retry import BackoffPolicy
from pipeline.store import make_engine, session_factory
from pipeline.testing import BrokerHandle, unique_name
from tests.envelope_kit import Fleet

pytestmark = pytest.mark.kafka


class Letters:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def stage(self, tx: Staged, failure: FailureContext) -> None:
        tx.after_commit(lambda: self.reasons.append(failure.reason))


class Verifying:
    def __init__(self, verifier: Any) -> None:
        self.verifier = verifier
        self.applied: list[str] = []

    def handle(self, record: Record, tx: Staged) -> Outcome:
        d = decode(self.verifier, topic=record.topic, key=record.key, headers=record.headers,
                   value=record.value)  # fmt: skip
        tx.after_commit(lambda: self.applied.append(d.verified.envelope.msg_id))
        return ACK


def test_each_bad_envelope_is_dead_lettered_with_its_reason(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    topics = TopicNames(prefix=unique_name("test.envrt") + ".")
    apply_topology(kafka.bootstrap, TopologySpec(hosts=("b",), topics=topics, inbox_partitions=1))
    f = Fleet(topics=topics)
    f.now = int(time.time() * 1000)
    inbox = topics.inbox("b")

    def rec(signer: Signer, **kw: Any) -> tuple[bytes, list[tuple[str, bytes]], bytes]:
        return encode(f.envelope(**kw), topic=inbox, signer=signer)

    a = f.signers["a"]
    good1, good2 = rec(a, msg_id="good-1"), rec(a, msg_id="good-2")
    k, h, v = rec(a)
    inj = schemas.encode("injected", {"msg_id": "m", "recipient": "w-a", "injected_at_ms": 1})
    records = [
        (good1, None),
        ((k, None, v), r.NOT_SIGNED),
        ((k, h, v + b"!"), r.SIG_INVALID),
        (rec(Signer.generate("d")), r.UNKNOWN_KEY),
        (rec(a, kind=Kind.INJECTED, body=inj[:-1]), r.SCHEMA_INVALID),
        (rec(a, sender="m-c"), r.SIGNER_MISMATCH),
        ((b"m-x", h, v), r.TO_MISMATCH),
        (good2, None),
    ]
    producer = Producer(producer_config(kafka.bootstrap))
    for (key, headers, value), _ in records:
        producer.produce(inbox, key=key, value=value, headers=headers)
    assert producer.flush(30) == 0

    letters, handler = Letters(), Verifying(f.verifier("b"))
    runtime = ConsumerRuntime(
        RuntimeConfig(
            bootstrap=kafka.bootstrap,
            group_id=unique_name("test.gw"),
            topics=(inbox,),
            retry=BackoffPolicy(base_s=0.0, max_attempts=1, jitter=0),
        ),
        handler=handler,
        sessions=session_factory(_engine(tmp_path)),
        dead_letters=letters,
    )
    runtime.subscribe()
    deadline = time.monotonic() + 60
    try:
        while len(letters.reasons) + len(handler.applied) < len(records):
            assert time.monotonic() < deadline, (letters.reasons, handler.applied)
            runtime.step()  # never raises on a bad envelope
    finally:
        runtime.close()
    assert handler.applied == ["good-1", "good-2"]
    assert letters.reasons == [reason for _, reason in records if reason is not None]


def _engine(tmp_path: Path) -> Any:
    from pipeline.store import metadata

    engine = make_engine(f"sqlite:///{tmp_path / 'gw.sqlite'}")
    metadata.create_all(engine)
    return engine
