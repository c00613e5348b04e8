"""FAILED reporter dedupe on SQLite and PostgreSQL (R-DLQ-4): one FAILED per original
msgId, only for verified deliveries with a sender, and a crash after the emit re-emits the SAME
msgId."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.envelope.receipts import failed_msg_id
from pipeline.failures.dlq import DeadLetterView
from pipeline.failures.reporter import FailedReporter, eligible
from pipeline.store import make_engine


class Sink:
    def __init__(self, fail_after_emit: bool = False) -> None:
        self.emitted: list[str] = []
        self.fail_after_emit = fail_after_emit

    def emit_failed(
        self,
        *,
        original_msg_id: str,
        sender: str,
        reason: str,
        error: str,
        dead_letter: DeadLetterView,
    ) -> None:
        self.emitted.append(failed_msg_id(original_msg_id))
        if self.fail_after_emit:
            raise KeyboardInterrupt("killed between emit and the reported row")


def view(
    msg_id: str,
    *,
    kind: str = "SEND",
    sender: str | None = "a@h2",
    verified: bool = True,
    offset: int = 0,
) -> DeadLetterView:
    headers = [("msgId", msg_id.encode()), ("kind", kind.encode())]
    if sender:
        headers.append(("from", sender.encode()))
    context: dict[str, Any] = {"reason": "EXPIRED", "error": "late", "verified": verified}
    return DeadLetterView(
        dlq_topic="fleet.dlq",
        dlq_partition=0,
        dlq_offset=offset,
        key=b"k",
        headers=headers,
        value=b"",
        context=context,
    )


def test_eligibility_needs_a_delivery_kind_a_sender_and_a_verified_envelope() -> None:
    assert eligible(view("m", kind="SEND")) and eligible(view("m", kind="ASK"))
    assert eligible(view("m", kind="SPAWN"))
    assert not eligible(view("m", kind="REPLY"))
    assert not eligible(view("m", sender=None))
    assert not eligible(view("m", verified=False))  # a forged `from` must not cause FAILED spam


def test_one_failed_per_original_msg_id_across_redelivery_and_crash(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        crashing = Sink(fail_after_emit=True)
        reporter = FailedReporter(consumer=None, engine=engine, sink=crashing)
        with pytest.raises(KeyboardInterrupt):
            reporter.handle(view("m1"))
        sink = Sink()
        reporter = FailedReporter(consumer=None, engine=engine, sink=sink)
        assert reporter.handle(view("m1")) is True  # re-emitted after the crash ...
        assert crashing.emitted == sink.emitted == ["failed-m1"]  # ... with the same msgId
        assert reporter.handle(view("m1", offset=9)) is False  # a second dead letter: skipped
        assert reporter.handle(view("m2", verified=False)) is False
        assert reporter.handle(view("m3", kind="ASK")) is True
        assert sink.emitted == ["failed-m1", "failed-m3"]
    finally:
        engine.dispose()
