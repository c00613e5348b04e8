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


# A dynamic member (no group.instance.id) sees these while a rebalance is under way: its
# generation moved on and it rejoins. Only a static member is fenced by them (a second member
# with its id, or a zombie past its session timeout).
REBALANCE_CODES = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
    }
)


@dataclass
class CommitResult:
    ok: bool
    fenced: bool = False
    errors: list[str] = field(default_factory=list)
    rebalancing: bool = False  # every error is a REBALANCE_CODES one and none is fatal


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
        return CommitResult(
            ok=False,
            fenced=fatal or code in FENCING_CODES,
            errors=[str(exc)],
            rebalancing=not fatal and code in REBALANCE_CODES,
        )
    failed = [tp for tp in (result or []) if tp.error]
    errors = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in failed]
    fenced = any(tp.error.code() in FENCING_CODES for tp in failed)
    rebalancing = bool(failed) and all(tp.error.code() in REBALANCE_CODES for tp in failed)
    return CommitResult(ok=not errors, fenced=fenced, errors=errors, rebalancing=rebalancing)
