"""The signing FAILED sink on SQLite and PostgreSQL (R-DLQ-4: a DLQ consumer reports every
dead-lettered forward brief back to its sender as FAILED).

The FAILED is an outbox row staged in the reporter's own transaction: it verifies at the sender's
gateway, exists exactly when the reporter's dedupe row does, and goes to the host that signed the
brief.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from pipeline.envelope import BoundedSeenSet, Envelope, Kind, Signer, TrustStore, Verifier, encode
from pipeline.envelope.receipts import read_receipt
from pipeline.failures.dlq import DeadLetterView
from pipeline.failures.reporter import FailedReporter, reported_table
from pipeline.gateway.failed_for_dead_letter import EnvelopeFailedSink
from pipeline.host import roster_cache
from pipeline.host.outbound import Publisher
from pipeline.kafka.topics import TopicNames
from pipeline.outbox import outbox
from pipeline.record_headers import unpack_headers
from pipeline.store import make_engine, session_factory

TOPICS = TopicNames(prefix="fleet.")
SIGNERS = {h: Signer.generate(h) for h in ("A", "B", "X")}


class Presence:
    def host_of(self, gid: str) -> str | None:
        return {"main-a": "A", "worker-b": "B"}.get(gid)


def trust(*hosts: str) -> TrustStore:
    store = TrustStore()
    for h in hosts:
        store.add(h, SIGNERS[h].key_id, SIGNERS[h].public_key_bytes)
    return store


def dead_letter(signer: str = "A", msg_id: str = "m1") -> DeadLetterView:
    """A brief main-a -> worker-b, signed by ``signer``, dead-lettered at B as TTL_TOO_LONG."""
    brief = Envelope.new(
        kind=Kind.SEND, sender="main-a", to="worker-b", body=b"do it", ttl_s=900, msg_id=msg_id
    )
    key, headers, value = encode(brief, topic=TOPICS.inbox("B"), signer=SIGNERS[signer])
    return DeadLetterView(
        dlq_topic=TOPICS.dlq,
        dlq_partition=0,
        dlq_offset=7,
        key=key,
        headers=headers,
        value=value,
        context={"reason": "TTL_TOO_LONG", "error": "ttl 900000 ms", "verified": True},
    )


def reporter(engine: Engine, trusted: TrustStore) -> FailedReporter:
    sink = EnvelopeFailedSink(
        publisher=Publisher(host="B", signer=SIGNERS["B"], topics=TOPICS), trust=trusted
    )
    return FailedReporter(consumer=None, engine=engine, sink=sink)  # type: ignore[arg-type]


def rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(outbox)))


def reported(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(reported_table)).scalar_one())


def test_failed_is_staged_with_the_reported_row_and_verifies_at_the_sender(
    store_url: str,
) -> None:
    engine = make_engine(store_url)
    try:
        view = dead_letter()
        assert reporter(engine, trust("A", "B")).handle(view) is True
        assert reporter(engine, trust("A", "B")).handle(view) is False  # redelivered: skipped
        [row] = rows(engine)
        assert reported(engine) == 1
        assert row.topic == TOPICS.inbox("A"), "the inbox of the host that signed the brief"
        verified = Verifier(
            host="A", trust=trust("A", "B"), presence=Presence(), seen=BoundedSeenSet()
        ).verify(
            topic=row.topic,
            key=row.key,
            headers=unpack_headers(row.headers),
            value=row.value,
        )
        env = verified.envelope
        assert (env.kind, env.sender, env.to) == (Kind.FAILED, "B._gateway", "main-a")
        assert env.msg_id == "failed-m1" and env.trace_id == view.header("traceId")
        receipt = read_receipt("FAILED", env.body)
        assert (receipt.msg_id, receipt.recipient) == ("m1", "worker-b")
        assert (receipt.reason, receipt.stage) == ("TTL_TOO_LONG", "dlq")
    finally:
        engine.dispose()


def test_unknown_key_falls_back_to_the_roster_else_nothing_is_staged(store_url: str) -> None:
    """A brief signed by a key this host does not trust: the roster places the sender; without
    a roster entry nothing is staged and no reported row is left behind."""
    engine = make_engine(store_url)
    try:
        assert reporter(engine, trust("B")).handle(dead_letter("X", "m2")) is False
        assert rows(engine) == [] and reported(engine) == 0
        with session_factory(engine).begin() as s:
            roster_cache.replace_all(
                s, [roster_cache.RosterEntry("main-a", "A", "main", "pull", (), 1)]
            )  # long expired: still the sender's last known host
        assert reporter(engine, trust("B")).handle(dead_letter("X", "m2")) is True
        assert [r.topic for r in rows(engine)] == [TOPICS.inbox("A")]
        assert reported(engine) == 1
    finally:
        engine.dispose()
