"""Trace ids: the envelope's ``traceId`` as an OpenTelemetry trace id, and ``traceparent``.

A ``traceId`` minted by a fleet sender is a uuid4's 32 hex digits, a valid W3C trace id, used as
it is. One given by a caller (``--trace``, ``FLEET_TRACE_ID``) may be any string: one that is not
32 hex digits (or is all zeros) is mapped to the first 16 bytes of its SHA-256, so the same
``traceId`` gives the same trace on every host.
"""

from __future__ import annotations

import hashlib
import re
import threading

_HEX32 = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def trace_int(trace_id: str) -> int:
    """The 128-bit trace id of an envelope's ``traceId`` (see the module docstring)."""
    if _HEX32.fullmatch(trace_id):
        n = int(trace_id, 16)
        if n:
            return n
    return int.from_bytes(hashlib.sha256(trace_id.encode("utf-8")).digest()[:16])


def format_traceparent(trace_id: int, span_id: int, sampled: bool = True) -> bytes:
    return b"00-%032x-%016x-%s" % (trace_id, span_id, b"01" if sampled else b"00")


def parse_traceparent(value: bytes | str | None) -> tuple[int, int, bool] | None:
    """``(trace id, parent span id, sampled)`` of a version-00 ``traceparent``; ``None`` when
    absent or malformed (the header is advisory: a bad one is ignored, never an error)."""
    if value is None:
        return None
    text = value.decode("ascii", "replace") if isinstance(value, bytes | bytearray) else value
    m = _TRACEPARENT.fullmatch(text.strip())
    if m is None:
        return None
    trace_id, span_id = int(m.group(1), 16), int(m.group(2), 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, bool(int(m.group(3), 16) & 1)


class ForcedTraceId(threading.local):
    """The trace id the next root span on this thread must take (the envelope's, not a random
    one): set by :mod:`.spans` around ``start_span``, read by the SDK's id generator that the
    composition root installs (``pipeline.bootstrap.tracing``)."""

    value: int | None = None


FORCED = ForcedTraceId()
