"""The hooks of :class:`~pipeline.tracing.seam.Spans` over the OpenTelemetry API.

Imported only when tracing is on (the composition root installs it): this is the one module of
the seam that imports ``opentelemetry``. It never imports the SDK: the provider it is handed
decides where spans go.

How a span finds its parent (docs/observability.md has the tree):

* across processes, the ``traceparent`` header (stored with the outbox row, replaced by the
  relay with its own span's, read by the consumer), used only when its trace id is the
  envelope's signed one;
* within a gateway, a bounded map ``msgId -> span`` of the last consume, inject and receipt
  spans, and per thread the last span that said it causes what the thread stages next in the
  same trace (consume, the FAILED reporter, SPAWN / STOP, a pool step).

A span with no parent starts a trace whose id is the envelope's ``traceId``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from pipeline.record import Headers

from . import names as n
from .ids import FORCED, format_traceparent, parse_traceparent, trace_int
from .seam import Message

RECENT = 10_000  # msgIds remembered per map: a few seconds of traffic at the bench's rates


class _Recent:
    """A bounded ``msgId -> SpanContext`` map, oldest dropped first, shared by threads."""

    def __init__(self, cap: int = RECENT) -> None:
        self._cap = cap
        self._items: dict[str, SpanContext] = {}
        self._lock = threading.Lock()

    def put(self, key: str, ctx: SpanContext) -> None:
        with self._lock:
            self._items[key] = ctx
            if len(self._items) > self._cap:
                self._items.pop(next(iter(self._items)))

    def get(self, key: str) -> SpanContext | None:
        with self._lock:
            return self._items.get(key)

    def pop(self, key: str) -> SpanContext | None:
        with self._lock:
            return self._items.pop(key, None)


class _Cause(threading.local):
    ctx: SpanContext | None = None


def _kind_of(msg: Message) -> str:
    kind = msg.kind
    return str(getattr(kind, "value", kind))


def _header(headers: Iterable[tuple[str, bytes]], name: str) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _remote_parent(headers: Iterable[tuple[str, bytes]]) -> SpanContext | None:
    parsed = parse_traceparent(_header(headers, n.TRACEPARENT))
    if parsed is None:
        return None
    flags = TraceFlags(TraceFlags.SAMPLED if parsed[2] else TraceFlags.DEFAULT)
    return SpanContext(parsed[0], parsed[1], is_remote=True, trace_flags=flags)


class OtelSpans:
    """The installed hooks (see the module docstring); ``host`` is this gateway's id."""

    def __init__(self, tracer: trace.Tracer, *, host: str) -> None:
        self._tracer = tracer
        self._host = host
        self._received = _Recent()  # msgId -> its fleet.inbox.consume
        self._injects = _Recent()  # msgId -> its fleet.inject
        self._causes = _Recent()  # msgId of a message about to be staged -> its parent
        self._cause = _Cause()

    # -- span making --------------------------------------------------------------------------
    def _span(
        self,
        name: str,
        *,
        trace_id: int | None,
        parent: SpanContext | None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        start_ns: int | None = None,
    ) -> SpanContext:
        """Start and end one span; its context. Under ``parent`` when ``parent`` is in the same
        trace (or ``trace_id`` is None), else a root whose trace id is ``trace_id``."""
        if parent is not None and (trace_id is None or parent.trace_id == trace_id):
            ctx = trace.set_span_in_context(NonRecordingSpan(parent))
        else:
            ctx, FORCED.value = Context(), trace_id
        try:
            span = self._tracer.start_span(
                name, context=ctx, kind=kind, attributes=attributes, start_time=start_ns
            )
        finally:
            FORCED.value = None
        span.end()
        return span.get_span_context()

    def _attributes(self, msg: Message, topic: str | None = None) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            n.MESSAGING_SYSTEM: "kafka",
            n.MESSAGE_ID: msg.msg_id,
            n.KAFKA_KEY: msg.to,
            n.FLEET_KIND: _kind_of(msg),
            n.FLEET_HOST: self._host,
        }
        if topic is not None:
            attrs[n.DESTINATION] = topic
        return attrs

    def _current(self, trace_id: int | None) -> SpanContext | None:
        ctx = self._cause.ctx
        return ctx if ctx is not None and ctx.trace_id == trace_id else None

    # -- the hooks ----------------------------------------------------------------------------
    def staged(self, msg: Message, topic: str, headers: Headers) -> Headers:
        tid = trace_int(msg.trace_id)
        parent = self._causes.pop(msg.msg_id) or self._current(tid)
        attrs = self._attributes(msg, topic)
        if parent is None:  # nothing of this gateway caused it: a client's send
            parent = self._span(
                n.SEND, trace_id=tid, parent=None, kind=SpanKind.PRODUCER,
                attributes=attrs | {n.OPERATION: "send"}, start_ns=msg.ts_ms * 1_000_000,
            )  # fmt: skip
        commit = self._span(n.OUTBOX_COMMIT, trace_id=tid, parent=parent, attributes=attrs)
        return [*headers, (n.TRACEPARENT, format_traceparent(tid, commit.span_id))]

    def produced(self, topic: str, headers: Headers) -> Headers:
        at = next((i for i, (k, _) in enumerate(headers) if k == n.TRACEPARENT), None)
        parsed = None if at is None else parse_traceparent(headers[at][1])
        if at is None or parsed is None:
            return headers  # staged while tracing was off: nothing to continue
        tid, span_id, _sampled = parsed
        parent = SpanContext(
            tid, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
        attrs: dict[str, Any] = {
            n.MESSAGING_SYSTEM: "kafka",
            n.DESTINATION: topic,
            n.OPERATION: "send",
            n.FLEET_HOST: self._host,
        }
        for header, key in ((n.H_MSG_ID, n.MESSAGE_ID), (n.H_TO, n.KAFKA_KEY),
                            (n.H_KIND, n.FLEET_KIND)):  # fmt: skip
            value = _header(headers, header)
            if value is not None:
                attrs[key] = bytes(value).decode("utf-8", "replace")
        span = self._span(
            n.RELAY_PRODUCE, trace_id=tid, parent=parent, kind=SpanKind.PRODUCER, attributes=attrs
        )
        out = list(headers)
        out[at] = (n.TRACEPARENT, format_traceparent(tid, span.span_id))
        return out

    def consumed(self, msg: Message, topic: str, headers: Sequence[tuple[str, bytes]]) -> None:
        tid = trace_int(msg.trace_id)
        parent = _remote_parent(headers)
        attrs = self._attributes(msg, topic) | {n.OPERATION: "receive"}
        ctx = self._span(
            n.INBOX_CONSUME, trace_id=tid, parent=parent, kind=SpanKind.CONSUMER, attributes=attrs
        )
        self._received.put(msg.msg_id, ctx)
        self._cause.ctx = ctx

    def _under_receive(self, msg: Message) -> tuple[int, SpanContext | None]:
        tid = trace_int(msg.trace_id)
        return tid, self._received.get(msg.msg_id) or self._current(tid)

    def held(self, msg: Message, recipient: str) -> None:
        tid, parent = self._under_receive(msg)
        attrs = self._attributes(msg) | {n.FLEET_RECIPIENT: recipient}
        self._span(n.HOLD, trace_id=tid, parent=parent, attributes=attrs)

    def injected(self, msg: Message, gid: str, outcome: str, queued_at: float) -> None:
        tid, parent = self._under_receive(msg)
        attrs = self._attributes(msg) | {n.FLEET_RECIPIENT: gid, n.INJECT_OUTCOME: outcome}
        start = time.time_ns() - int(max(0.0, time.monotonic() - queued_at) * 1e9)
        ctx = self._span(n.INJECT, trace_id=tid, parent=parent, attributes=attrs, start_ns=start)
        self._injects.put(msg.msg_id, ctx)

    def receipt(self, brief: Message, receipt: Message) -> None:
        tid = trace_int(receipt.trace_id)
        parent = self._injects.get(brief.msg_id) or self._received.get(brief.msg_id)
        attrs = self._attributes(receipt) | {"fleet.about": brief.msg_id}
        ctx = self._span(n.RECEIPT_STAGE, trace_id=tid, parent=parent, attributes=attrs)
        self._causes.put(receipt.msg_id, ctx)

    def event(
        self,
        name: str,
        *,
        trace_id: str,
        msg_id: str,
        headers: Sequence[tuple[str, bytes]] = (),
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        tid = trace_int(trace_id) if trace_id else None
        parent = self._received.get(msg_id) or _remote_parent(headers)
        attrs = {n.MESSAGE_ID: msg_id, n.FLEET_HOST: self._host, **(attributes or {})}
        self._cause.ctx = self._span(name, trace_id=tid, parent=parent, attributes=attrs)
