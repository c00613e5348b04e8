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
from .model import Envelope, parsed_envelope

_DECIMAL = re.compile(rb"^(0|[1-9][0-9]{0,15})$")
SIG_LEN = 64
MAC_LEN = 32  # HMAC-SHA256
RawHeaders = Sequence[tuple[str, bytes | str | None]]
_RESERVED = r.RESERVED
_REQUIRED = frozenset(r.REQUIRED)
_BYTES_ONLY = {bytes}
_PLAIN_NAMES: set[str] = set()  # uncovered header names already found not to look reserved
_MAX_PLAIN_NAMES = 4096  # bounded: foreign headers cannot grow it without limit
_VERSION = str(r.VERSION).encode()
_KINDS: dict[bytes, r.Kind] = {k.value.encode("ascii"): k for k in r.Kind}


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
    # This runs once per record on the consume path. The usual record carries its reserved
    # headers each once and all bytes, beside a few uncovered ones (the relay's fold headers)
    # whose names were seen before: then the dict, the duplicate check (no name lost in the
    # dict), the name checks and the size are a few C-level calls. Anything else (a new or
    # look-alike name, a repeat, a value that is None or not bytes) takes the one-pass loop,
    # which says what is wrong.
    fields: dict[str, bytes] = dict(headers)  # type: ignore[arg-type]  # checked just below
    if len(fields) == len(headers) and {*map(type, fields.values())} == _BYTES_ONLY:
        extra = fields.keys() - _RESERVED
        if not extra or extra <= _PLAIN_NAMES or _plain(extra):
            size = (len(key) if key else 0) + sum(map(len, fields)) + sum(map(len, fields.values()))
            if size > max_header_bytes:
                fail(r.TOO_LARGE, f"headers+key {size} bytes > {max_header_bytes}", raw)
            for name in extra:  # uncovered: carried, never read by the envelope layer
                del fields[name]
        else:
            fields = _collect_each(key, headers, raw, max_header_bytes=max_header_bytes)
    else:
        fields = _collect_each(key, headers, raw, max_header_bytes=max_header_bytes)
    if r.H_SIG in fields:
        if r.H_MAC in fields:
            fail(r.MALFORMED_HEADERS, "both 'sig' and 'mac': a record carries exactly one tag", raw)
        tag = r.H_SIG
    elif r.H_MAC in fields:
        tag = r.H_MAC
    else:
        fail(r.NOT_SIGNED, "no 'sig' (or 'mac') header", raw)
    if not fields.keys() >= _REQUIRED:
        fail(
            r.MALFORMED_HEADERS,
            f"missing headers {[h for h in r.REQUIRED if h not in fields]}",
            raw,
        )
    if fields[r.H_V] != _VERSION:
        fail(r.UNSUPPORTED_VERSION, f"envelope version {fields[r.H_V]!r}", raw)
    if tag == r.H_SIG:
        if len(fields[r.H_SIG]) != SIG_LEN:
            fail(r.SIG_INVALID, f"sig is {len(fields[r.H_SIG])} bytes, not 64", raw)
    elif len(fields[r.H_MAC]) != MAC_LEN:
        fail(r.MAC_INVALID, f"mac is {len(fields[r.H_MAC])} bytes, not {MAC_LEN}", raw)
    return fields


def _plain(names: set[str]) -> bool:
    """Whether every name is text that does not fold to a reserved one (a look-alike); such
    names are remembered, up to a bound, so the next record's check is a subset test."""
    for name in names:
        if type(name) is not str or r.RESERVED_FOLDED.get(name.casefold()) is not None:
            return False
    if len(_PLAIN_NAMES) < _MAX_PLAIN_NAMES:
        _PLAIN_NAMES.update(names)
    return True


def _collect_each(
    key: bytes | None, headers: RawHeaders, raw: dict[str, Any], *, max_header_bytes: int
) -> dict[str, bytes]:
    """:func:`collect`'s one pass over any headers: the size bound is summed while the reserved
    headers are picked out, and checked before any is returned."""
    size = len(key) if key else 0
    fields: dict[str, bytes] = {}
    look_alike = duplicate = no_value = None
    reserved = _RESERVED
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
    return fields


def _as_bytes(val: bytes | str) -> bytes:
    return val.encode("utf-8") if isinstance(val, str) else bytes(val)


def parse(fields: dict[str, bytes], body: bytes, raw: dict[str, Any]) -> Envelope:
    """Stage 4: field syntax, only after the signature has vouched for the bytes. The usual
    record is read straight through; any field that is not well formed sends the record to
    :func:`_parse_each`, which checks them in order and names the first that is wrong."""
    kind = _KINDS.get(fields[r.H_KIND])
    get = fields.get
    turn, spawn = get(r.H_TURN_ID), get(r.H_SPAWN_ID)
    ts, expires = fields[r.H_TS], fields[r.H_EXPIRES_AT]
    try:
        msg_id = fields[r.H_MSG_ID].decode()
        trace_id = fields[r.H_TRACE_ID].decode()
        sender = fields[r.H_FROM].decode()
        to = fields[r.H_TO].decode()
        turn_id = None if turn is None else turn.decode()
        spawn_id = None if spawn is None else spawn.decode()
    except UnicodeDecodeError:
        kind = None
    if (
        kind is None
        or not (msg_id and trace_id and sender and to)
        or turn_id == ""
        or spawn_id == ""
        or _DECIMAL.match(ts) is None
        or _DECIMAL.match(expires) is None
    ):
        return _parse_each(fields, body, raw)
    return parsed_envelope(
        kind, msg_id, trace_id, sender, to, int(ts), int(expires), body, turn_id, spawn_id
    )


def _parse_each(fields: dict[str, bytes], body: bytes, raw: dict[str, Any]) -> Envelope:
    """:func:`parse` field by field, in the order the checks are documented."""
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
