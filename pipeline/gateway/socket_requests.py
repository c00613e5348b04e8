"""The local socket's requests: a frame's fields checked and turned into the call it asks for.

A malformed request is ``CONFIG_INVALID`` (an unknown kind ``UNKNOWN_KIND``) and is answered at
once, without reaching the store (:mod:`.socket_server`).
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.envelope import Kind
from pipeline.errors import ConfigError
from pipeline.reasons import Verification

from .client import SendRequest

if TYPE_CHECKING:
    from pipeline.control.client import ControlClient

_KINDS = {k.value: k for k in Kind}


def parse_kind(text: str) -> Kind:
    """``text`` as a :class:`Kind` (any case), or ``UNKNOWN_KIND`` -- for the CLI and the socket."""
    kind = _KINDS.get(text)  # the wire's own spelling: a dict look-up, not Enum's constructor
    if kind is not None:
        return kind
    try:
        return Kind(str(text).upper())
    except ValueError:
        raise ConfigError(f"unknown kind {text!r}", reason=Verification.UNKNOWN_KIND) from None


def parse_send(message: dict[str, Any]) -> SendRequest:
    """A ``send`` request's fields as a SendRequest; a malformed one is ``CONFIG_INVALID``."""
    try:
        sender, to, body = message["sender"], message["to"], message["body"]
        if not isinstance(sender, str) or not isinstance(to, str) or not isinstance(body, str):
            raise TypeError("sender, to and body must be strings")
        ttl, turn_id = message.get("ttl_s"), message.get("turn_id")
        trace_id = message.get("trace_id")
        if ttl is not None and not isinstance(ttl, int | float):
            raise TypeError("ttl_s must be a number")
        if turn_id is not None and not isinstance(turn_id, str):
            raise TypeError("turn_id must be a string")
        if trace_id is not None and (not isinstance(trace_id, str) or not trace_id):
            raise TypeError("trace_id must be a non-empty string")
        # base64.b64decode(validate=True) checks the alphabet with a regular expression first;
        # strict mode is the same check in the C decoder, one call (a non-ASCII body is a
        # ValueError either way, refused like any other malformed field)
        raw = binascii.a2b_base64(body, strict_mode=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"local socket: malformed send request: {exc}") from None
    return SendRequest(
        sender=sender,
        to=to,
        body=raw,
        kind=parse_kind(message.get("kind", "SEND")),
        ttl_s=float(ttl) if ttl is not None else None,
        turn_id=turn_id,
        trace_id=trace_id,
    )


# The control plane's requests (ControlClient.spawn / .stop): their fields and value types.
_TEXT, _MAYBE_TEXT, _MAYBE_INT = (str,), (str, type(None)), (int, type(None))
CONTROL_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "spawn": {"requester": _TEXT, "host": _TEXT, "profile": _TEXT, "spawn_id": _MAYBE_TEXT,
              "parent": _MAYBE_TEXT, "job": _MAYBE_TEXT, "brief": _MAYBE_TEXT,
              "budget": _MAYBE_INT},
    "stop": {"requester": _TEXT, "gid": _TEXT, "host": _MAYBE_TEXT, "reason": _MAYBE_TEXT,
             "stop_id": _MAYBE_TEXT},
}  # fmt: skip


def parse_control(message: dict[str, Any], control: ControlClient) -> Callable[[], Any]:
    """A ``spawn`` / ``stop`` request as the ControlClient call it asks for; a malformed one is
    ``CONFIG_INVALID``."""
    op = str(message.get("op"))
    fields = CONTROL_FIELDS[op]
    kwargs: dict[str, Any] = {}
    for name, types in fields.items():
        value = message.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ConfigError(f"local socket: malformed {op} request: {name} is {value!r}")
        kwargs[name] = value
    return functools.partial(control.spawn if op == "spawn" else control.stop, **kwargs)


def parse_poll(message: dict[str, Any]) -> dict[str, Any]:
    """A ``poll`` request as GatewayClient.poll's arguments; a malformed one is
    ``CONFIG_INVALID``."""
    recipient, sender = message.get("recipient"), message.get("sender")
    limit, wait_s = message.get("limit", 100), message.get("wait_s", 0.0)
    if (
        not isinstance(recipient, str)
        or not isinstance(sender, str | None)
        or not isinstance(limit, int)
        or isinstance(limit, bool)
        or not isinstance(wait_s, int | float)
        or isinstance(wait_s, bool)
    ):
        raise ConfigError(f"local socket: malformed poll request: {message!r}")
    return {"recipient": recipient, "sender": sender, "limit": limit, "wait_s": float(wait_s)}
