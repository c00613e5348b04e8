"""The DLQ reporter's plain sink: each FAILED as an unsigned record on one topic (tests, runs).

A :class:`~pipeline.failures.reporter.FailedSink`. The production sink (sign a FAILED envelope,
stage it for the sender's host inbox) is the gateway's ``failed_for_dead_letter.py``; this one
writes an unsigned record to one topic so the reporter's exactly-once effect can be checked end
to end. It blocks until the broker confirmed the record, as the port requires.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from pipeline.envelope.receipts import failed_body, failed_msg_id
from pipeline.errors import BrokerError
from pipeline.kafka.clients import new_producer
from pipeline.kafka.settings import producer_config
from pipeline.record import key_text

from .dlq import DeadLetterView


class TopicFailedSink:
    """Writes FAILED as ``key=sender``, headers ``kind=FAILED``, ``msgId=failed-<original>``,
    body an Avro ``failed`` record (``stage="dlq"``), unsigned."""

    def __init__(self, producer: Producer | str, topic: str, *, timeout_s: float = 30.0) -> None:
        self._producer = (
            new_producer(producer_config(producer)) if isinstance(producer, str) else producer
        )
        self.topic = topic
        self.timeout_s = timeout_s

    def emit_failed(
        self,
        *,
        original_msg_id: str,
        sender: str,
        reason: str,
        error: str,
        dead_letter: DeadLetterView,
    ) -> None:
        body = failed_body(
            original_msg_id,
            dead_letter.header("to") or key_text(dead_letter.key),
            reason=reason,
            error=error,
            stage="dlq",
        )
        report: list[Any] = []
        self._producer.produce(
            self.topic,
            key=sender.encode(),
            value=body,
            headers=[
                ("kind", b"FAILED"),
                ("msgId", failed_msg_id(original_msg_id).encode()),
                ("to", sender.encode()),
            ],
            on_delivery=lambda err, _msg: report.append(err),
        )
        deadline = time.monotonic() + self.timeout_s
        while not report and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if not report or report[0] is not None:
            raise BrokerError(f"FAILED for {original_msg_id} not confirmed: {report or 'timeout'}")
