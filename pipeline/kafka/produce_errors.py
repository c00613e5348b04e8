"""librdkafka produce errors, classified in one place: transient (retry) or permanent (terminal).

A permanent error cannot pass by sending the same record again: the relay turns it into a
terminal state for the row instead of retrying forever (docs/outbox.md, "permanent errors").
Everything not listed as permanent is treated as transient (the safe side: a retry).
"""

from __future__ import annotations

from typing import Any

from pipeline.reasons import ProducePermanent


def _codes() -> dict[int, ProducePermanent]:
    from confluent_kafka import KafkaError

    return {
        KafkaError.MSG_SIZE_TOO_LARGE: ProducePermanent.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD: ProducePermanent.INVALID_RECORD,
        KafkaError.INVALID_MSG: ProducePermanent.CORRUPT_MESSAGE,
        KafkaError.INVALID_MSG_SIZE: ProducePermanent.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE: ProducePermanent.RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED: ProducePermanent.NOT_AUTHORIZED,
        KafkaError.TOPIC_EXCEPTION: ProducePermanent.INVALID_TOPIC,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT: ProducePermanent.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError._INVALID_ARG: ProducePermanent.INVALID_ARG,
    }


_PERMANENT: dict[int, ProducePermanent] | None = None


def permanent_reason(err: Any) -> ProducePermanent | None:
    """The permanent reason of a delivery error or a ``KafkaException``; ``None``: transient."""
    global _PERMANENT  # noqa: PLW0603 - a lazily built constant (confluent_kafka imported late)
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if not isinstance(err, KafkaError) or err.fatal():
        return None  # a fatal producer error: the producer is rebuilt and the row retried
    if _PERMANENT is None:
        _PERMANENT = _codes()
    return _PERMANENT.get(err.code())


def permanent_error(err: Any, *, topic: str) -> str:
    """What a permanently refused row's ``error`` says: for a refused write, the
    :class:`~pipeline.errors.SecurityError` naming the topic and the operation (``NOT_AUTHORIZED``,
    with its hint); else the client's own text."""
    from confluent_kafka import KafkaError, KafkaException

    from .refusals import security_error

    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    refused = security_error(err, "write", resource=topic) if isinstance(err, KafkaError) else None
    return str(refused if refused is not None else err)
