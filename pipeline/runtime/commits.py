"""Synchronous offset commits that check every partition's result.

The forward path (at-most-once) injects only after this returns ``ok``; on any error it injects
nothing. Fencing (a second gateway with the same ``group.instance.id``, or a zombie whose
generation is gone) is reported separately: the caller must stop, loudly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

FENCING_CODES = frozenset(
    {
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
    }
)


@dataclass
class CommitResult:
    ok: bool
    fenced: bool = False
    errors: list[str] = field(default_factory=list)


def commit_offsets(consumer: Any, offsets: dict[tuple[str, int], int]) -> CommitResult:
    """Commit ``{(topic, partition): next_offset}`` synchronously; never raises."""
    if not offsets:
        return CommitResult(ok=True)
    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    try:
        result = consumer.commit(offsets=tps, asynchronous=False)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        fatal = bool(isinstance(err, KafkaError) and err.fatal())
        return CommitResult(ok=False, fenced=fatal or code in FENCING_CODES, errors=[str(exc)])
    errors = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in (result or []) if tp.error]
    fenced = any(tp.error and tp.error.code() in FENCING_CODES for tp in (result or []))
    return CommitResult(ok=not errors, fenced=fenced, errors=errors)
