"""Read what the stores and the injector's file say happened, as history rows.

After heal-and-drain the driver reads: the recipient host's held rows (``held``), the injected
msgIds the worker's command appended (``injected``), dead letters staged in either host's outbox
(``dead_letter``, with the reason from their context header), FAILED receipts held for the
sender (``failed``), INJECTED receipts the sender recorded after its FAILED
(``late_injected``) or with stage ``uncertain`` (``inject_uncertain``), and the sender's outbox rows that never shipped (``unshipped``) or were
refused for good (``rejected``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import select

from pipeline import schemas
from pipeline.failures.dlq import DLQ_HEADER, SCHEMA
from pipeline.gateway.deadlines import LATE, UNCERTAIN
from pipeline.gateway.held import held_table
from pipeline.gateway.receipts import read_receipt
from pipeline.gateway.tracking import forward_table
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


def held_rows(url: str, recipient: str) -> Iterator[dict[str, Any]]:
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(held_table.c.msg_id, held_table.c.drained_at_ms, held_table.c.kind)
            q = q.where(held_table.c.recipient == recipient).order_by(held_table.c.id)
            for r in c.execute(q):
                yield row(
                    Op.HELD, msgId=r.msg_id, to=recipient, drained=r.drained_at_ms is not None
                )
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


def outbox_rows(url: str, dlq_topic: str, host: str) -> Iterator[dict[str, Any]]:
    """Dead letters staged at ``host``, and its rows that never shipped or were refused."""
    engine = _engine(url)
    try:
        with engine.connect() as c:
            q = select(outbox.c.topic, outbox.c.headers, outbox.c.status, outbox.c.error)
            for r in c.execute(q.order_by(outbox.c.id)):
                headers = bytes(r.headers) if r.headers is not None else None
                mid = _header(headers, "msgId") or ""
                if r.topic == dlq_topic:
                    ctx_raw = next(
                        (bytes(v) for k, v in unpack_headers(headers) if k == DLQ_HEADER), None
                    )
                    ctx = schemas.decode(SCHEMA, ctx_raw) if ctx_raw else {}
                    yield row(Op.DEAD_LETTER, msgId=mid, reason=str(ctx.get("reason", "")), at=host)
                elif r.status == RowStatus.PENDING:
                    yield row(Op.UNSHIPPED, msgId=mid, at=host)
                elif r.status in (RowStatus.FAILED, RowStatus.DROPPED):
                    reason = r.error or ("DROPPED" if r.status == RowStatus.DROPPED else "")
                    yield row(Op.REJECTED, msgId=mid, reason=reason, at=host)
    finally:
        engine.dispose()


def injected_ids(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []
