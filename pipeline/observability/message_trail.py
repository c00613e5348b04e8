"""Everything one store knows about one message, in time order: ``fleet trace MSGID``.

A message leaves marks in several tables of the stores it passes through, each keyed its own
way; this module gathers them into one list of :class:`TrailEvent` so an operator stops joining
``fleet poll``, ``fleet outbox status`` and ``fleet dlq ls`` by hand:

* **outbox** (the sender's store): the row committed (``created_at``), then relayed
  (``sent_at``), dropped or refused for good (``error``). Found by the packed ``msgId`` header:
  the stored headers are a binary pack (:mod:`pipeline.record_headers`), so the exact bytes of
  ``msgId = <id>`` are a substring of the blob.
* **tracked send** (``fleet_forward_sends``; with the CLI's trackers also SPAWN and STOP
  requests): its deadline, and whether an ``INJECTED`` or a ``FAILED`` settled it.
* **received** (``fleet_dedupe``): the recipient's consumer applied it (one row per scope).
* **held** (``fleet_held``): held for a pull-mode entity, and when it was drained.
* **inject journal** (``fleet_inject_journal``): opened before the inject, closed with its outcome.
* **receipts**: the ``INJECTED`` / ``FAILED`` about it, held for the sender or staged in the
  recipient's outbox (same trace id, body naming the msgId), and ``failed-<id>`` / ``expired-<id>``.
* **dead-lettered** (``fleet_failed_reported``): the DLQ reporter turned its dead letter into a
  ``FAILED`` (reason, DLQ position).

Tables a store does not have are skipped. The trace id (the envelope's ``traceId``, a W3C trace
id) is taken from the first row that carries it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, inspect, select, text

from pipeline import schemas
from pipeline.envelope.reasons import H_KIND, H_MSG_ID, H_TO, H_TRACE_ID, Kind
from pipeline.envelope.receipts import (
    expired_msg_id,
    failed_msg_id,
    injected_msg_id,
    read_receipt,
)
from pipeline.errors import FleetError
from pipeline.failures.reporter import reported_table
from pipeline.host.deadlines import Tracked
from pipeline.host.held import held_table
from pipeline.host.inject_journal import journal_table
from pipeline.host.tracking import FORWARD
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.record_headers import pack_headers, unpack_headers
from pipeline.runtime.dedupe import dedupe_table
from pipeline.store.engine import readonly

RECEIPT_KINDS = ("INJECTED", "FAILED")
RECEIPTS = Kind.RECEIPTS.value  # INJECTEDs batched in one record (docs/envelope.md)
DLQ_SUFFIX = TopicNames(prefix=".").dlq  # "<prefix>dlq" whatever the prefix


@dataclass(frozen=True, kw_only=True)
class TrailEvent:
    at_ms: int
    where: str  # the host (or store) whose table says it
    what: str  # outbox | relay | tracked | received | held | drained | inject | receipt | dlq
    detail: str
    trace_id: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def message_trail(
    engine: Engine, msg_id: str, *, where: str, tracked: Sequence[Tracked] = (FORWARD,)
) -> list[TrailEvent]:
    """Every mark ``msg_id`` left in this store, oldest first. ``tracked``: the deadline
    trackers whose rows to read (the CLI adds SPAWN and STOP, which live in a later layer)."""
    ro = readonly(engine)
    tables = set(inspect(ro).get_table_names())
    with ro.connect() as conn:
        events = list(_marks(conn, tables, msg_id, where, tracked))
        trace = next((e.trace_id for e in events if e.trace_id), "")
        if trace:
            events.extend(_receipts(conn, tables, msg_id, trace, where))
    return sorted(events, key=order_key)


# a message's stages in the order they happen: two marks of one millisecond (a batch's dedupe
# claim and the hold it commits with it) are listed as they happened, not by name
_STAGES = {
    what: i
    for i, what in enumerate(
        ("tracked", "outbox", "relay", "received", "held", "inject", "receipt", "dlq", "drained")
    )
}


def order_key(e: TrailEvent) -> tuple[int, int]:
    """Time first; within one millisecond, the stage order of a message's life."""
    return (e.at_ms, _STAGES.get(e.what, len(_STAGES)))


def _marks(
    conn: Connection, tables: set[str], msg_id: str, where: str, tracked: Sequence[Tracked]
) -> Iterator[TrailEvent]:
    if outbox.name in tables:
        yield from _outbox_rows(conn, _header_match(conn, H_MSG_ID, msg_id), where, "")
    for kind in tracked:
        t = kind.table
        if t.name not in tables:
            continue
        # named columns, the host only where the store has it: a store not yet upgraded to
        # revision 0017 (a peer's, in a rolling upgrade) is read as it is
        has_host = "host" in {c["name"] for c in inspect(conn).get_columns(t.name)}
        columns = [t.c[n] for n in (kind.owner, kind.about, "sent_ms", "trace_id",
                                    "deadline_ms", "state", "reason")]  # fmt: skip
        query = select(*columns, *([t.c.host] if has_host else []))
        for r in conn.execute(query.where(t.c.msg_id == msg_id)):
            owner, about = getattr(r, kind.owner), getattr(r, kind.about)
            host = getattr(r, "host", None)
            yield TrailEvent(
                at_ms=r.sent_ms, where=where, what="tracked", trace_id=r.trace_id,
                detail=f"{kind.name}: {owner} -> {about}" + (f" on {host}" if host else "")
                + f", waits for an answer until {_clock(r.deadline_ms)}; now {r.state}"
                + (f" ({r.reason})" if r.reason else ""),
            )  # fmt: skip
    if dedupe_table.name in tables:
        t = dedupe_table
        for r in conn.execute(select(t).where(t.c.msg_id == msg_id)):
            yield TrailEvent(
                at_ms=r.seen_at_ms, where=where, what="received",
                detail=f"consumed and applied once (dedupe row, scope {r.scope})",
            )  # fmt: skip
    if held_table.name in tables:
        t = held_table
        ids = (msg_id, failed_msg_id(msg_id), expired_msg_id(msg_id), injected_msg_id(msg_id))
        for r in conn.execute(select(t).where(t.c.msg_id.in_(ids))):
            yield from _held(r, where, about=r.msg_id != msg_id)
    if journal_table.name in tables:
        t = journal_table
        for r in conn.execute(select(t).where(t.c.msg_id == msg_id)):
            yield TrailEvent(
                at_ms=r.opened_ms, where=where, what="inject", trace_id=r.trace_id,
                detail=f"inject journal opened for {r.gid} (from {r.sender})",
            )  # fmt: skip
            if r.closed_ms is not None:
                yield TrailEvent(
                    at_ms=r.closed_ms, where=where, what="inject", trace_id=r.trace_id,
                    detail=f"inject journal closed: {r.state}",
                )  # fmt: skip
            else:
                yield TrailEvent(
                    at_ms=r.opened_ms, where=where, what="inject", trace_id=r.trace_id,
                    detail="inject journal still open (being injected, or uncertain at restart)",
                )  # fmt: skip
    if reported_table.name in tables:
        t = reported_table
        for r in conn.execute(select(t).where(t.c.original_msg_id == msg_id)):
            yield TrailEvent(
                at_ms=r.reported_ms, where=where, what="dlq",
                detail=f"dead-lettered ({r.reason}, {r.dead_letter_ref}); "
                f"FAILED {r.failed_msg_id} sent to {r.sender}",
            )  # fmt: skip


def _receipts(
    conn: Connection, tables: set[str], msg_id: str, trace: str, where: str
) -> Iterator[TrailEvent]:
    """INJECTED / FAILED about ``msg_id``: same trace id, and a body naming it."""
    if held_table.name in tables:
        t = held_table
        rows = conn.execute(
            select(t).where(
                t.c.trace_id == trace,
                t.c.kind.in_(RECEIPT_KINDS),
                t.c.msg_id.notin_(
                    (failed_msg_id(msg_id), expired_msg_id(msg_id), injected_msg_id(msg_id))
                ),
            )
        )
        for r in rows:
            if _about(r.kind, bytes(r.body)) == msg_id:
                yield from _held(r, where, about=True)
    if outbox.name in tables:
        yield from _outbox_rows(conn, _header_match(conn, H_TRACE_ID, trace), where, msg_id)
        # an INJECTED sent inside a RECEIPTS record: the record has a trace id of its own, each
        # item carries the brief's (Avro writes it as its bytes: a substring of the value)
        batches = and_(_header_match(conn, H_KIND, RECEIPTS), _value_has(conn, trace))
        yield from _outbox_rows(conn, batches, where, msg_id)


def _outbox_rows(conn: Connection, match: Any, where: str, about: str) -> Iterator[TrailEvent]:
    """Outbox rows matched by a header; with ``about``, only receipts about that msgId."""
    t = outbox
    for r in conn.execute(select(t).where(match).order_by(t.c.id)):
        headers = {k: bytes(v).decode("utf-8", "replace") for k, v in unpack_headers(r.headers)}
        kind = headers.get(H_KIND, "?")
        trace = headers.get(H_TRACE_ID, "")
        name = kind
        if about:
            found = _receipt_in(kind, bytes(r.value or b""), about, headers.get(H_MSG_ID, "?"))
            if found is None:
                continue
            name, trace = found[0], found[1] or trace
        if r.topic.endswith(DLQ_SUFFIX):  # the recipient's dead letter, staged like any record
            name = f"dead letter of the {name}"
        yield TrailEvent(
            at_ms=int(r.created_at * 1000), where=where, what="outbox", trace_id=trace,
            detail=f"{name} to {headers.get(H_TO, '?')} committed to the outbox "
            f"(row {r.id}, topic {r.topic}, branch {r.branch_key} lsn {r.lsn})",
        )  # fmt: skip
        status = RowStatus(r.status)
        if status == RowStatus.SENT and r.sent_at is not None:
            detail = f"relayed: the broker confirmed row {r.id}"
            yield TrailEvent(at_ms=int(r.sent_at * 1000), where=where, what="relay",
                             detail=detail, trace_id=trace)  # fmt: skip
        elif status != RowStatus.SENT:
            detail = f"row {r.id} {status.name}" + (f" ({r.error})" if r.error else "")
            yield TrailEvent(at_ms=int(r.created_at * 1000), where=where, what="relay",
                             detail=detail, trace_id=trace)  # fmt: skip


def _held(r: Any, where: str, *, about: bool) -> Iterator[TrailEvent]:
    label = f"{r.kind} {r.msg_id}" if about else r.kind
    extra = ""
    if r.kind in RECEIPT_KINDS:
        try:
            receipt = read_receipt(r.kind, bytes(r.body))
            extra = "".join(
                f", {k} {v}" for k, v in (("stage", receipt.stage), ("reason", receipt.reason)) if v
            )
        except FleetError:
            extra = ", unreadable body"
    yield TrailEvent(
        at_ms=r.held_at_ms, where=where, what="held", trace_id=r.trace_id or "",
        detail=f"{label} from {r.sender} held for {r.recipient}{extra}",
    )  # fmt: skip
    if r.drained_at_ms is not None:
        yield TrailEvent(at_ms=r.drained_at_ms, where=where, what="drained",
                         detail=f"{label} handed to {r.recipient} (poll)",
                         trace_id=r.trace_id or "")  # fmt: skip


def _about(kind: str, body: bytes) -> str | None:
    try:
        return read_receipt(kind, body).msg_id
    except FleetError:
        return None


def _receipt_in(kind: str, value: bytes, about: str, msg_id: str) -> tuple[str, str] | None:
    """The receipt about ``about`` in an outbox row's value, as (its name, its trace id when
    not the row's): an INJECTED / FAILED itself, or an item of a RECEIPTS; None: no such."""
    if kind in RECEIPT_KINDS:
        return (f"{kind} {msg_id}", "") if _about(kind, value) == about else None
    if kind != RECEIPTS:
        return None
    try:
        items = schemas.decode("receipts", value)["items"]
    except FleetError:
        return None
    for item in items:
        if _about("INJECTED", bytes(item["body"])) == about:
            return f"INJECTED {item['msg_id']} in RECEIPTS {msg_id}", str(item["trace_id"])
    return None


def _contains(conn: Connection, column: Any, needle: bytes) -> Any:
    """``column`` of the outbox contains ``needle``: a substring test on the bytes (its bind
    named after the column, so a header test and a value test go in one statement)."""
    if conn.dialect.name == "sqlite":
        return func.instr(column, needle) > 0
    name = f"needle_{column.name}"
    return text(f"position(:{name} in outbox.{column.name}) > 0").bindparams(**{name: needle})


def _value_has(conn: Connection, text_: str) -> Any:
    """``value`` contains ``text_``'s UTF-8 bytes."""
    return _contains(conn, outbox.c.value, text_.encode("utf-8"))


def _header_match(conn: Connection, name: str, value: str) -> Any:
    """``headers`` contains the packed bytes of one header: a substring test on the blob."""
    return _contains(conn, outbox.c.headers, pack_headers([(name, value.encode("utf-8"))]))


def _clock(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%H:%M:%S.%f")[:-3] + " UTC"
