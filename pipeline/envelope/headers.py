"""The pre-crypto and post-crypto header stages of verification (see :mod:`.verify`).

``collect`` bounds the record and picks out the reserved headers as raw bytes (nothing is
decoded before the signature is checked); ``parse`` turns signed bytes into an
:class:`Envelope`. Both raise ``EnvelopeError`` with a reason code and the raw record.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NoReturn

from pipeline.errors import EnvelopeError

from . import reasons as r
from .model import Envelope

_DECIMAL = re.compile(rb"^(0|[1-9][0-9]{0,15})$")
SIG_LEN = 64
MAC_LEN = 32  # HMAC-SHA256
RawHeaders = Sequence[tuple[str, bytes | str | None]]


def fail(reason: str, message: str, raw: dict[str, Any], env: Envelope | None = None) -> NoReturn:
    context = {} if env is None else {"msg_id": env.msg_id, "from": env.sender, "to": env.to}
    raise EnvelopeError(message, reason=reason, raw=raw, context=context)


def collect(
    key: bytes | None,
    headers: RawHeaders | None,
    body: bytes,
    raw: dict[str, Any],
    *,
    max_headers: int,
    max_header_bytes: int,
    max_body_bytes: int,
) -> dict[str, bytes]:
    """Stages 1-2 without crypto: bounds, then the reserved headers as raw bytes. Exactly one
    tag travels: ``sig`` (Ed25519) or ``mac`` (the pairwise HMAC, :mod:`.pairwise`)."""
    if not headers:
        fail(r.NOT_SIGNED, "record has no headers", raw)
    if len(headers) > max_headers:
        fail(r.TOO_LARGE, f"{len(headers)} headers > {max_headers}", raw)
    if len(body) > max_body_bytes:
        fail(r.TOO_LARGE, f"body {len(body)} bytes > {max_body_bytes}", raw)
    # One pass (this runs once per record on the consume thread): the size bound is
    # summed while the reserved headers are picked out, and checked before any is returned.
    size = len(key) if key else 0
    fields: dict[str, bytes] = {}
    look_alike = duplicate = no_value = None
    reserved = r.RESERVED
    for name, val in headers:
        size += len(name) + (len(val) if val else 0)
        if name not in reserved:  # the exact names take the fast path; the rest are folded
            if look_alike is None and r.RESERVED_FOLDED.get(str(name).casefold()) is not None:
                look_alike = name
            continue  # uncovered header: carried, never read by the envelope layer
        if name in fields:
            duplicate = duplicate or name
        elif val is None:
            no_value = no_value or name
        else:
            fields[name] = val if type(val) is bytes else _as_bytes(val)
    if size > max_header_bytes:
        fail(r.TOO_LARGE, f"headers+key {size} bytes > {max_header_bytes}", raw)
    if look_alike is not None:
        fail(r.MALFORMED_HEADERS, f"look-alike header {look_alike!r}", raw)
    if duplicate is not None:
        fail(r.MALFORMED_HEADERS, f"duplicate header {duplicate!r}", raw)
    if no_value is not None:
        fail(r.MALFORMED_HEADERS, f"header {no_value!r} has no value", raw)
    tag = r.H_SIG if r.H_SIG in fields else r.H_MAC if r.H_MAC in fields else None
    if tag is None:
        fail(r.NOT_SIGNED, "no 'sig' (or 'mac') header", raw)
    if tag == r.H_SIG and r.H_MAC in fields:
        fail(r.MALFORMED_HEADERS, "both 'sig' and 'mac': a record carries exactly one tag", raw)
    missing = [h for h in r.REQUIRED if h not in fields]
    if missing:
        fail(r.MALFORMED_HEADERS, f"missing headers {missing}", raw)
    if fields[r.H_V] != str(r.VERSION).encode():
        fail(r.UNSUPPORTED_VERSION, f"envelope version {fields[r.H_V]!r}", raw)
    if tag == r.H_SIG and len(fields[r.H_SIG]) != SIG_LEN:
        fail(r.SIG_INVALID, f"sig is {len(fields[r.H_SIG])} bytes, not 64", raw)
    if tag == r.H_MAC and len(fields[r.H_MAC]) != MAC_LEN:
        fail(r.MAC_INVALID, f"mac is {len(fields[r.H_MAC])} bytes, not {MAC_LEN}", raw)
    return fields


def _as_bytes(val: bytes | str) -> bytes:
    return val.encode("utf-8") if isinstance(val, str) else bytes(val)


def parse(fields: dict[str, bytes], body: bytes, raw: dict[str, Any]) -> Envelope:
    """Stage 4: field syntax, only after the signature has vouched for the bytes."""
    try:
        kind = r.Kind(fields[r.H_KIND].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        fail(r.UNKNOWN_KIND, f"unknown kind {fields[r.H_KIND]!r}", raw)
    texts: dict[str, str | None] = {}
    for name in (r.H_MSG_ID, r.H_TRACE_ID, r.H_FROM, r.H_TO, r.H_TURN_ID, r.H_SPAWN_ID):
        val = fields.get(name)
        if val is None:
            texts[name] = None
            continue
        try:
            texts[name] = val.decode("utf-8")
        except UnicodeDecodeError:
            fail(r.MALFORMED_HEADERS, f"header {name!r} is not UTF-8", raw)
        if not val:
            fail(r.MALFORMED_HEADERS, f"header {name!r} is empty", raw)
    times: dict[str, int] = {}
    for name in (r.H_TS, r.H_EXPIRES_AT):
        if not _DECIMAL.match(fields[name]):
            fail(r.MALFORMED_HEADERS, f"header {name!r} is not a decimal", raw)
        times[name] = int(fields[name])
    return Envelope(
        kind=kind,
        msg_id=texts[r.H_MSG_ID] or "",
        trace_id=texts[r.H_TRACE_ID] or "",
        sender=texts[r.H_FROM] or "",
        to=texts[r.H_TO] or "",
        ts_ms=times[r.H_TS],
        expires_at_ms=times[r.H_EXPIRES_AT],
        body=body,
        turn_id=texts[r.H_TURN_ID],
        spawn_id=texts[r.H_SPAWN_ID],
        v=r.VERSION,
    )
