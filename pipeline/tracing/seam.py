"""The one object every layer calls: :data:`TRACING`, off until the composition root installs
spans. A call site reads ``TRACING.on`` first, so an uninstalled seam costs one attribute read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from pipeline.record import Headers


class Message(Protocol):
    """What a span needs of a message (the envelope has it; this layer sits below it)."""

    @property
    def msg_id(self) -> str: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def to(self) -> str: ...
    @property
    def ts_ms(self) -> int: ...


class Spans(Protocol):
    """The hooks, one per hop (docs/observability.md, "Tracing", has the span tree)."""

    def staged(self, msg: Message, topic: str, headers: Headers) -> Headers:
        """``fleet.outbox.commit`` (under ``fleet.send`` for a client's send); returns the
        headers to store, with the commit's ``traceparent`` added."""
        ...

    def produced(self, topic: str, headers: Headers) -> Headers:
        """``fleet.relay.produce``, child of the stored ``traceparent``; returns the headers
        to publish with the relay span's ``traceparent`` in its place."""
        ...

    def consumed(self, msg: Message, topic: str, headers: Sequence[tuple[str, bytes]]) -> None:
        """``fleet.inbox.consume`` (consumed and verified), child of the record's
        ``traceparent`` when its trace id is the envelope's."""
        ...

    def held(self, msg: Message, recipient: str) -> None: ...

    def injected(self, msg: Message, gid: str, outcome: str, queued_at: float) -> None:
        """``fleet.inject`` from the brief's queueing (a ``time.monotonic()``) to ``outcome``."""
        ...

    def receipt(self, brief: Message, receipt: Message) -> None:
        """``fleet.receipt.stage``: the parent of the receipt's ``fleet.outbox.commit``."""
        ...

    def event(
        self,
        name: str,
        *,
        trace_id: str,
        msg_id: str,
        headers: Sequence[tuple[str, bytes]] = (),
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """A span ``name`` about message ``msg_id`` (``trace_id`` empty: a trace of its own),
        under the consume span of ``msg_id``, else the ``traceparent`` in ``headers``; what this
        thread stages next in the same trace is its child (the FAILED reporter, SPAWN / STOP, a
        pool step)."""
        ...


class Tracing:
    """The seam: ``on`` and the installed :class:`Spans` (see the module docstring)."""

    __slots__ = ("on", "spans")

    def __init__(self) -> None:
        self.on = False
        self.spans: Spans | None = None

    def install(self, spans: Spans | None) -> None:
        """Turn tracing on with ``spans``, or off with ``None`` (the composition root's call)."""
        self.spans = spans
        self.on = spans is not None

    def _installed(self) -> Spans:
        spans = self.spans
        if spans is None:  # a call site that did not read ``on`` first
            raise RuntimeError("tracing is off: read TRACING.on before calling a hook")
        return spans

    def staged(self, msg: Message, topic: str, headers: Headers) -> Headers:
        return self._installed().staged(msg, topic, headers)

    def produced(self, topic: str, headers: Headers) -> Headers:
        return self._installed().produced(topic, headers)

    def consumed(self, msg: Message, topic: str, headers: Sequence[tuple[str, bytes]]) -> None:
        self._installed().consumed(msg, topic, headers)

    def held(self, msg: Message, recipient: str) -> None:
        self._installed().held(msg, recipient)

    def injected(self, msg: Message, gid: str, outcome: str, queued_at: float) -> None:
        self._installed().injected(msg, gid, outcome, queued_at)

    def receipt(self, brief: Message, receipt: Message) -> None:
        self._installed().receipt(brief, receipt)

    def event(
        self,
        name: str,
        *,
        trace_id: str,
        msg_id: str,
        headers: Sequence[tuple[str, bytes]] = (),
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self._installed().event(
            name, trace_id=trace_id, msg_id=msg_id, headers=headers, attributes=attributes
        )


#: The process's seam. Import the object, never copy ``on``: installing flips it in place.
TRACING = Tracing()
