"""Telling systemd how a ``Type=notify`` service is doing: ``READY=1``, ``STOPPING=1``.

The whole protocol is one datagram of ``KEY=VALUE`` lines sent to the ``AF_UNIX`` socket named
by ``$NOTIFY_SOCKET`` (``@name`` is a socket in the abstract namespace). No library needed.
Without the variable (not run by systemd) every call is a no-op, so a process calls these
unconditionally. A message systemd never receives must not stop the service: a send that fails
is logged and reported as ``False``, never raised (deploy/systemd/, docs/observability.md).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)

NOTIFY_SOCKET = "NOTIFY_SOCKET"


def notify_address(environ: Mapping[str, str] | None = None) -> str | None:
    """The notify socket's address (abstract names start with a NUL byte), or None when the
    process was not started by a service manager that listens."""
    raw = (os.environ if environ is None else environ).get(NOTIFY_SOCKET, "")
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # unset, empty, or not a unix socket path (vsock is not for us)


def notify(state: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (``"READY=1"``, ``"STOPPING=1"``, ``"STATUS=..."``: lines of KEY=VALUE);
    True when it was sent, False when there is no notify socket or the send failed."""
    address = notify_address(environ)
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode("utf-8"), address)
    except OSError as exc:
        log.warning("sd_notify %r to %r failed: %s", state, address, exc)
        return False
    return True


def ready(status: str = "", *, environ: Mapping[str, str] | None = None) -> bool:
    """``READY=1`` (and a ``STATUS=`` line when given): start-up is done."""
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""), environ=environ)


def stopping(*, environ: Mapping[str, str] | None = None) -> bool:
    """``STOPPING=1``: a clean stop has begun."""
    return notify("STOPPING=1", environ=environ)
