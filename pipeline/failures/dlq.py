"""The dead-letter record format, a blocking writer and a reader (R-DLQ-1, R-DLQ-2).

A dead letter is the original record, unchanged -- same key, same headers in the same order,
same body bytes -- plus ONE appended header, ``fleet.dlq``, whose value is an Avro
``dead_letter`` record (``schemas/dead_letter.v1.avsc``) with the context: reason code, bounded
error text, original topic/partition/offset/timestamp, attempts, first/last failure time,
gateway, group, and whether the envelope had been verified. Keeping the original bytes verbatim
is what makes a replay carry the same ``msgId`` and signature, so the consumer's dedupe holds.

After it come the same facts as plain UTF-8 text, one header each (``fleet.dlq.reason``,
``fleet.dlq.original.topic``, ``...partition``, ``...offset``, ``...timestamp``,
``fleet.dlq.exception.class`` and ``...message``, ...: :func:`plain_headers`), in the manner of
Kafka Connect's ``__connect.errors.*``: what kcat, Kafka UI or AKHQ show without our schema
(docs/failures.md). The Avro header stays the one our tools read.

The reader takes the LAST ``fleet.dlq`` header as the context, everything before it as the
original headers and everything after it as ours, so a ``fleet.dlq`` header smuggled into an
original record can never pass for ours.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer

from pipeline import schemas
from pipeline.errors import BrokerError, EnvelopeError
from pipeline.kafka.clients import new_producer
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.reasons import Failure
from pipeline.record import Headers, key_text
from pipeline.runtime.context import FailureContext
from pipeline.support.clock import now_ms

DLQ_HEADER = "fleet.dlq"
PLAIN_PREFIX = DLQ_HEADER + "."
# the plain-text header names, each beside the Avro context field it repeats (None: derived)
PLAIN_FIELDS: tuple[tuple[str, str | None], ...] = (
    ("reason", "reason"),
    ("original.topic", "topic"),
    ("original.partition", "partition"),
    ("original.offset", "offset"),
    ("original.timestamp", "timestamp_ms"),
    ("exception.class", None),
    ("exception.message", "error"),
    ("attempts", "attempts"),
    ("gateway", "gateway"),
    ("group", "group"),
)
# how the runtime records an exception it did not classify: "Name: text", perhaps after
# "RETRIES_EXHAUSTED after N attempts: " (pipeline/runtime/decide.py)
_EXCEPTION = re.compile(
    r"^(?:[A-Z_]+ after \d+ attempts: )?([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Timeout)): "
)
SCHEMA = "dead_letter"
MAX_ERROR_BYTES = 1024
DLQ_WRITE_FAILED = Failure.DLQ_WRITE_FAILED


def bounded_error(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, never splitting a character."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def normalise_headers(headers: Sequence[tuple[str, Any]] | None) -> Headers:
    return [(k, b"" if v is None else bytes(v)) for k, v in (headers or [])]


@dataclass(frozen=True, kw_only=True)
class DeadLetterView:
    """One dead letter as read back: the original record plus its context."""

    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    key: bytes | None
    headers: Headers  # the original headers, in order, without our context header
    value: bytes | None
    context: dict[str, Any]

    @property
    def ref(self) -> str:
        """A stable pointer to this dead letter: ``<dlq topic>:<partition>:<offset>``."""
        return f"{self.dlq_topic}:{self.dlq_partition}:{self.dlq_offset}"

    def header(self, name: str) -> str | None:
        """The last original header called ``name``, decoded as UTF-8 (None when absent)."""
        for k, v in reversed(self.headers):
            if k == name:
                return v.decode("utf-8", "replace")
        return None

    @property
    def msg_id(self) -> str | None:
        return self.header("msgId")

    @property
    def kind(self) -> str | None:
        return self.header("kind")

    @property
    def sender(self) -> str | None:
        return self.header("from")

    @property
    def reason(self) -> str:
        return str(self.context["reason"])

    @property
    def verified(self) -> bool:
        return bool(self.context.get("verified", False))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (bytes shown as UTF-8 with replacement) for the CLI."""
        return {
            "ref": self.ref,
            "key": None if self.key is None else key_text(self.key),
            "headers": {k: v.decode("utf-8", "replace") for k, v in self.headers},
            "value_bytes": 0 if self.value is None else len(self.value),
            **self.context,
        }


def read_dead_letter(msg: Any) -> DeadLetterView:
    """Read a consumed DLQ message; a record without our context header is ``SCHEMA_INVALID``."""
    raw = normalise_headers(msg.headers())
    idx = max((i for i, (k, _) in enumerate(raw) if k == DLQ_HEADER), default=-1)
    if idx < 0:
        raise EnvelopeError(
            f"record at {msg.topic()}:{msg.partition()}:{msg.offset()} has no {DLQ_HEADER} header",
            reason=schemas.SCHEMA_INVALID,
            raw=msg,
        )
    context = schemas.decode(SCHEMA, raw[idx][1])
    return DeadLetterView(
        dlq_topic=msg.topic(),
        dlq_partition=msg.partition(),
        dlq_offset=msg.offset(),
        key=msg.key(),
        headers=raw[:idx],  # after the context: our plain-text copy of it
        value=msg.value(),
        context=context,
    )


def dead_letter_headers(failure: FailureContext, *, gateway: str, group: str | None) -> Headers:
    """The headers of a dead letter: the original ones, verbatim, plus our context header.

    Key and body are the original ones. Every sink (the blocking writer below, or an outbox row
    shipped by the relay) produces exactly this, keyed by the original key.
    """
    rec = failure.record
    context = {
        "reason": str(failure.reason),
        "error": bounded_error(failure.error),
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp_ms": rec.timestamp_ms,
        "attempts": failure.attempts,
        "first_failure_ms": failure.first_failure_ms,
        "last_failure_ms": failure.last_failure_ms,
        "gateway": gateway,
        "group": group,
        "verified": failure.verified,
        "quarantined": failure.quarantined,
        "dead_lettered_ms": now_ms(),
    }
    return [
        *normalise_headers(rec.headers),
        (DLQ_HEADER, schemas.encode(SCHEMA, context)),
        *plain_headers(context),
    ]


def exception_class(error: str) -> str | None:
    """The class name of an exception the runtime recorded as ``Name: text``; None for a
    failure the fabric classified itself (a reason code says what it was)."""
    found = _EXCEPTION.match(error)
    return None if found is None else found[1]


def plain_headers(context: Mapping[str, Any]) -> Headers:
    """The context as plain UTF-8 headers (``fleet.dlq.<name>``), for tools without our
    schema; a value that is absent (no group, no exception class) is left out."""
    out: Headers = []
    for name, field in PLAIN_FIELDS:
        value = context.get(field) if field else exception_class(str(context.get("error", "")))
        if value is not None:
            out.append((PLAIN_PREFIX + name, str(value).encode("utf-8")))
    return out


class DeadLetterWriter:
    """Writes dead letters and blocks until the broker confirmed each one (acks=all).

    The caller commits past the failed record only after :meth:`send` returned, so a crash or a
    broker outage loses nothing: the record is either confirmed in the DLQ or re-consumed.
    """

    def __init__(
        self,
        producer: Producer | str,
        topics: TopicNames,
        gateway: str,
        *,
        group: str | None = None,
        timeout_s: float = 30.0,
        topic: str | None = None,
    ) -> None:
        self._producer = (
            new_producer(producer_config(producer)) if isinstance(producer, str) else producer
        )
        self.topic = topic or topics.dlq
        self.gateway = gateway
        self.group = group
        self.timeout_s = timeout_s

    def send(self, failure: FailureContext) -> tuple[int, int]:
        """Produce one dead letter and wait for its delivery report; returns (partition, offset).

        Raises a retriable :class:`BrokerError` (``DLQ_WRITE_FAILED``) when the broker did not
        confirm in time: the caller must not commit past the record then.
        """
        out: list[tuple[str, str | bytes | None]] = list(
            dead_letter_headers(failure, gateway=self.gateway, group=self.group)
        )
        key, value = failure.record.key, failure.record.value
        report: list[tuple[Any, Any]] = []
        try:
            self._producer.produce(
                self.topic,
                key=key,
                value=value,
                headers=out,
                on_delivery=lambda err, msg: report.append((err, msg)),
            )
        except (BufferError, KafkaException) as exc:  # a full local queue or a client error
            raise BrokerError(
                f"dead letter not queued: {exc}", reason=DLQ_WRITE_FAILED, retriable=True
            ) from exc
        deadline = time.monotonic() + self.timeout_s
        while not report and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if not report:
            raise BrokerError(
                f"dead letter to {self.topic} not confirmed within {self.timeout_s}s",
                reason=DLQ_WRITE_FAILED,
                retriable=True,
            )
        err, msg = report[0]
        if err is not None:
            raise BrokerError(
                f"dead letter to {self.topic} failed: {err}",
                reason=DLQ_WRITE_FAILED,
                retriable=True,
            )
        return int(msg.partition()), int(msg.offset())

    def close(self) -> None:
        self._producer.flush(self.timeout_s)
