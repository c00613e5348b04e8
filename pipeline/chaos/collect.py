"""Read what the stores and the injector's file say happened, as history rows.

After heal-and-drain the driver reads: the recipient host's held rows (``held``), the injected
msgIds the worker's command appended (``injected``), dead letters staged in either host's outbox
(``dead_letter``, with the reason from their context header), FAILED receipts held for the
sender (``failed``), INJECTED receipts the sender recorded after its FAILED
(``late_injected``) or with stage ``uncertain`` (``inject_uncertain``), and the sender's
outbox rows that never shipped (``unshipped``) or were refused for good (``rejected``); the
conversation refusals (``no_waiter``, ``too_late``) and the FAILED expiry notices held for an
asker; which hosts each broadcast was staged for (``staged``); and a run topic read from its
start through the production fold (:class:`~pipeline.outbox.fold.Fold`): ``run_applied`` per
``(BranchKey, Lsn)`` applied.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select

from pipeline import schemas
from pipeline.envelope.receipts import read_receipt
from pipeline.failures.dlq import DLQ_HEADER, SCHEMA
from pipeline.host.deadlines import LATE, UNCERTAIN
from pipeline.host.held import held_table
from pipeline.host.tracking import forward_table
from pipeline.kafka.clients import new_consumer
from pipeline.kafka.settings import consumer_config
from pipeline.outbox.fold import Fold
from pipeline.outbox.sent import is_pending
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.record_headers import unpack_headers
from pipeline.store import make_engine

from .history import Op, row


def _engine(url: str) -> Any:
    return make_engine(url, create=False)


def _header(blob: bytes | None, name: str) -> str | None:
    for k, v in reversed(unpack_headers(blob)):
        if k == name:
            return bytes(v).decode("utf-8", "replace")
    return None


# what a held row of each kind is in the history: a delivery, or a refusal about a turn
_HELD_AS = {"NO_WAITER": Op.NO_WAITER, "TOO_LATE": Op.TOO_LATE}


def held_rows(
    url: str, recipient: str, kinds: Collection[str] | None = None
) -> Iterator[dict[str, Any]]:
    """``recipient``'s held rows of ``kinds`` (None: every kind but receipts): a delivery is
    ``held``; a NO_WAITER or TOO_LATE held for it is that refusal, by ``turnId``."""
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(
                held_table.c.msg_id, held_table.c.drained_at_ms, held_table.c.kind,
                held_table.c.turn_id,
            ).where(held_table.c.recipient == recipient)  # fmt: skip
            if kinds is not None:
                q = q.where(held_table.c.kind.in_(list(kinds)))
            else:
                q = q.where(held_table.c.kind.not_in(["FAILED", "INJECTED"]))
            for r in c.execute(q.order_by(held_table.c.id)):
                op = _HELD_AS.get(r.kind)
                if op is not None:
                    yield row(op, turnId=r.turn_id, reason=r.kind, to=recipient)
                    continue
                fields: dict[str, Any] = {"kind": r.kind}
                if r.turn_id:
                    fields["turnId"] = r.turn_id
                yield row(
                    Op.HELD, msgId=r.msg_id, to=recipient, drained=r.drained_at_ms is not None,
                    **fields,
                )  # fmt: skip
    finally:
        engine.dispose()


def held_turns(url: str, recipient: str) -> set[str]:
    """Turns that ended for the asker ``recipient``: an ANSWER, a NO_WAITER or a FAILED (the
    expiry notice) held for it (the drain's measure of the conversations)."""
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(held_table.c.turn_id).where(
                held_table.c.recipient == recipient,
                held_table.c.kind.in_(["ANSWER", "NO_WAITER", "FAILED"]),
                held_table.c.turn_id.is_not(None),
            )
            return {str(r.turn_id) for r in c.execute(q)}
    finally:
        engine.dispose()


def held_count(url: str, recipient: str, kind: str | None = None) -> int:
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(held_table.c.id).where(held_table.c.recipient == recipient)
            if kind is not None:
                q = q.where(held_table.c.kind == kind)
            return len(list(c.execute(q)))
    finally:
        engine.dispose()


def failed_receipts(url: str, sender: str) -> Iterator[dict[str, Any]]:
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(held_table.c.body).where(
                held_table.c.recipient == sender, held_table.c.kind == "FAILED"
            )
            for r in c.execute(q.order_by(held_table.c.id)):
                rec = read_receipt("FAILED", bytes(r.body))
                yield row(Op.FAILED, msgId=rec.msg_id, reason=rec.reason, stage=rec.stage)
    finally:
        engine.dispose()


def _forward_in(url: str, state: str) -> list[str]:
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(forward_table.c.msg_id).where(forward_table.c.state == state)
            return [str(r.msg_id) for r in c.execute(q.order_by(forward_table.c.msg_id))]
    finally:
        engine.dispose()


def late_injected(url: str) -> Iterator[dict[str, Any]]:
    """Forward sends whose INJECTED reached the sender after its FAILED (state ``late``)."""
    for mid in _forward_in(url, LATE):
        yield row(Op.LATE_INJECTED, msgId=mid)


def uncertain_ids(url: str) -> list[str]:
    """Forward sends the sender recorded as ``uncertain`` (the inject journal's report)."""
    return _forward_in(url, UNCERTAIN)


def inject_uncertain(url: str) -> Iterator[dict[str, Any]]:
    for mid in uncertain_ids(url):
        yield row(Op.INJECT_UNCERTAIN, msgId=mid)


def outbox_rows(
    url: str, dlq_topic: str, host: str, run_topic: str | None = None
) -> Iterator[dict[str, Any]]:
    """Dead letters staged at ``host``, and its rows that never shipped or were refused (a run
    topic's rows by ``(branchKey, lsn)``: ``run_unshipped`` / ``run_rejected``)."""
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(
                outbox.c.topic, outbox.c.headers, outbox.c.status, outbox.c.error,
                outbox.c.branch_key, outbox.c.lsn, is_pending().label("pending"),
            )  # fmt: skip
            for r in c.execute(q.order_by(outbox.c.id)):
                headers = bytes(r.headers) if r.headers is not None else None
                mid = _header(headers, "msgId") or ""
                if run_topic is not None and r.topic == run_topic:
                    yield from _run_row(r)
                elif r.topic == dlq_topic:
                    ctx_raw = next(
                        (bytes(v) for k, v in unpack_headers(headers) if k == DLQ_HEADER), None
                    )
                    ctx = schemas.decode(SCHEMA, ctx_raw) if ctx_raw else {}
                    yield row(Op.DEAD_LETTER, msgId=mid, reason=str(ctx.get("reason", "")), at=host)
                elif r.pending:
                    yield row(Op.UNSHIPPED, msgId=mid, at=host)
                elif r.status in (RowStatus.FAILED, RowStatus.DROPPED):
                    reason = r.error or ("DROPPED" if r.status == RowStatus.DROPPED else "")
                    yield row(Op.REJECTED, msgId=mid, reason=reason, at=host)
    finally:
        engine.dispose()


def _run_row(r: Any) -> Iterator[dict[str, Any]]:
    pos = {"branchKey": r.branch_key, "lsn": int(r.lsn)}
    if r.pending:
        yield row(Op.RUN_UNSHIPPED, **pos)
    elif r.status in (RowStatus.FAILED, RowStatus.DROPPED):
        reason = r.error or ("DROPPED" if r.status == RowStatus.DROPPED else "")
        yield row(Op.RUN_REJECTED, reason=reason, **pos)


def pending_rows(url: str, topic: str) -> int:
    """Rows for ``topic`` still pending in the store's outbox."""
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(outbox.c.id).where(outbox.c.topic == topic, is_pending())
            return len(list(c.execute(q)))
    finally:
        engine.dispose()


def staged_rows(url: str, key: bytes, hosts: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """The sender's outbox rows with record key ``key`` (a broadcast's ``broadcast.<group>``):
    one ``staged`` row per (msgId, host), the host read off the row's topic (``hosts``: inbox
    topic -> host)."""
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(outbox.c.topic, outbox.c.headers).where(outbox.c.key == key)
            for r in c.execute(q.order_by(outbox.c.id)):
                headers = bytes(r.headers) if r.headers is not None else None
                host = hosts.get(r.topic)
                if host is not None:
                    yield row(Op.STAGED, msgId=_header(headers, "msgId") or "", host=host)
    finally:
        engine.dispose()


def run_topic_rows(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Read ``topic`` from its start to its high watermarks, in partition order, through the
    production fold: one ``run_applied`` row per ``(branchKey, lsn)`` the fold applied, in
    apply order, then one ``run_transport`` row (records read, copies the fold dropped)."""
    from confluent_kafka import TopicPartition

    out: list[dict[str, Any]] = []
    fold: Fold[None] = Fold(
        lambda branch, lsn, _item: out.append(row(Op.RUN_APPLIED, branchKey=branch, lsn=lsn))
    )
    consumer = new_consumer(consumer_config(bootstrap, f"chaos-collect-{topic}"))
    records = 0
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        parts = sorted(meta.partitions) if meta is not None and meta.partitions else []
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            pos, deadline = low, time.monotonic() + timeout_s
            while pos < high and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                pos = msg.offset() + 1
                records += 1
                fold.offer_record(msg.headers(), None)
    finally:
        consumer.close()
    applied = len(out)
    out.append(row(Op.RUN_TRANSPORT, records=records, applied=applied, copies=fold.duplicates))
    return out


def injected_ids(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []
