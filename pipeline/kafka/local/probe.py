"""Does the Kafka node on this port answer, itself? One ApiVersions request on a raw socket.

A metadata request through librdkafka cannot say: given one node's address as bootstrap, the
client learns every broker and sends later requests to any of them, so the answer comes from
whichever it picked (``orig_broker_id``). The chaos heal that waited for a restarted node by
that id waited out its whole 90 s bound for a node librdkafka happened not to ask, on every
step of a rolling restart. A broker answers ApiVersions on its own listener once its request
processing is on, which is the last step of its start-up; a node still recovering its logs, or
not running, refuses the connection or does not answer. PLAINTEXT listeners only.
"""

from __future__ import annotations

import socket
import struct

from .ports import LOOPBACK

API_VERSIONS = 18
_CORRELATION = 0x5EED
_CLIENT_ID = b"fleet-probe"


def node_answers(port: int, *, host: str = LOOPBACK, timeout_s: float = 2.0) -> bool:
    """True when the node listening on ``host:port`` answers an ApiVersions request (v0: every
    broker answers it, with ``UNSUPPORTED_VERSION`` at worst, which is an answer too)."""
    body = struct.pack(">hhih", API_VERSIONS, 0, _CORRELATION, len(_CLIENT_ID)) + _CLIENT_ID
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.settimeout(timeout_s)
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _read(s, 8)
    except OSError:
        return False
    if len(head) < 8:
        return False
    size, correlation = struct.unpack(">ii", head)
    return bool(correlation == _CORRELATION and size >= 4)


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data
