"""An offset that fell off retention while a gateway was down (retention-gap): host B must
refuse to resume (``OFFSETS_LOST``) until the operator resets its group, never skip silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.support.retrying import Backoff, retry_call

from .nemesis import NemesisContext
from .own_cluster import own_cluster

T = TypeVar("T")
# how long a restarted B gets to either stop with OFFSETS_LOST or commit past the deleted range
# (a gateway start takes 10-100 s on this shared machine)
RETENTION_VERDICT_S = 240.0


def _retrying(call: Callable[[], T], bound_s: float = 60.0) -> T:
    """``call`` until it succeeds or ``bound_s`` passes: a coordinator just after a restart
    answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a while."""
    return retry_call(
        call,
        retriable=lambda exc: isinstance(exc, KafkaException),
        backoff=Backoff(initial_s=0.5, max_s=0.5),
        deadline_s=bound_s,
    )


def _unread(
    cluster_conf: dict[str, Any], group: str, topic: str
) -> dict[int, tuple[int, int, list[str]]]:
    """Per partition of ``topic``: (committed, high watermark, msgIds in between) for ``group``,
    read without joining the group."""
    probe = Consumer(
        {**cluster_conf, "group.id": group, "enable.auto.commit": False, "log_level": 0}
    )
    out: dict[int, tuple[int, int, list[str]]] = {}
    try:
        parts = sorted(probe.list_topics(topic, timeout=10).topics[topic].partitions)
        committed = _retrying(
            lambda: probe.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        )
        for tp in committed:
            low, high = probe.get_watermark_offsets(tp, timeout=10, cached=False)
            start = max(tp.offset, low) if tp.offset >= 0 else low
            ids: list[str] = []
            if start < high:
                probe.assign([TopicPartition(topic, tp.partition, start)])
                deadline = time.monotonic() + 20
                while len(ids) < high - start and time.monotonic() < deadline:
                    msg = probe.poll(0.5)
                    if msg is None or msg.error() or (msg.offset() or 0) >= high:
                        continue
                    head = dict(msg.headers() or [])
                    raw = head.get("msgId")
                    ids.append(raw.decode() if isinstance(raw, bytes) else str(raw or ""))
                probe.unassign()
            out[tp.partition] = (tp.offset, high, ids)
    finally:
        probe.close()
    return out


def _committed(conf: dict[str, Any], group: str, topic: str) -> dict[int, int]:
    probe = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "log_level": 0})
    try:
        parts = probe.list_topics(topic, timeout=10).topics[topic].partitions
        got = probe.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    except KafkaException:
        return {}
    finally:
        probe.close()


def retention_gap(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    """kill -9 host B; while it is down A keeps sending and retention deletes everything B has
    not read (DeleteRecords to the high watermark - what retention does, made deterministic, as
    in tests/integration/test_offsets_lost.py); restart B. Defined behaviour (R-FAIL-7): B
    refuses to resume - OFFSETS_LOST, exit 3 - and only the operator's deliberate reset of the
    group to the log start lets it go on. Each deleted unread send is written to the history as
    refused with reason OFFSETS_LOST *only if B said so*; a silent skip leaves them lost."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    w = ctx.workload
    cluster = own_cluster(ctx)
    conf = cluster.client_config()
    b = w.procs["B"]
    topic, group = w.topics.inbox("B"), w.topics.gateway_group("B")
    b.kill9()
    time.sleep(down)
    unread = _unread(conf, group, topic)
    admin = AdminClient({**conf, "log_level": 0})
    doomed = [TopicPartition(topic, p, high) for p, (_c, high, ids) in unread.items() if ids]
    if doomed:
        for fut in admin.delete_records(doomed).values():
            fut.result(timeout=30)
    log_before = len(b.output())
    b.start()
    t0 = time.monotonic()
    skipped = False  # B committed past the deleted range: it resumed without a word
    while b.alive and not skipped and time.monotonic() - t0 < RETENTION_VERDICT_S:
        time.sleep(2.0)
        now = _committed(conf, group, topic)
        skipped = any(now.get(p, -1) > c for p, (c, _h, ids) in unread.items() if ids)
    said = b.output()[log_before:]
    refused = b.exit_code == 3 and ("OFFSETS_LOST" in said or "fell off retention" in said)
    reported = refused or "deleted before group" in said  # never committed: an ERROR line
    deleted = [m for _c, _h, ids in unread.values() for m in ids]
    if reported:
        ctx.history.extend(
            {
                "op": "rejected",
                "msgId": m,
                "reason": "OFFSETS_LOST",
                "by": "B",
                "source": "retention",
            }
            for m in deleted
        )
    if b.alive:  # it resumed without a word: stop it before the reset, which needs an empty group
        b.stop()
    reset = [TopicPartition(topic, p, high) for p, (_c, high, _ids) in unread.items()]

    def reset_group() -> None:  # the operator's deliberate act (docs/failures.md, runbook 5)
        # Refused per partition (not raised) while the group is not empty: B's static member
        # stays in it until its session times out, even after B exited.
        groups = [ConsumerGroupTopicPartitions(group, reset)]
        for fut in admin.alter_consumer_group_offsets(groups).values():
            done = fut.result(timeout=30)
            errors = [tp.error for tp in done.topic_partitions or [] if tp.error is not None]
            if errors:
                raise KafkaException(errors[0])

    _retrying(reset_group)
    b.start()
    detail = {
        "deleted_unread": len(deleted),
        "reported": reported,
        "refused": refused,
        "silent_skip": skipped,
        "verdict_s": round(time.monotonic() - t0, 3),
        "exit_code": b.exit_code,
        "down_s": round(down, 3),
    }
    return "B", detail
