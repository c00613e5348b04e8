"""A pure ASGI middleware honouring the ``Idempotency-Key`` header (R-EFF-3; the IETF draft).

For the configured methods (POST, PATCH): a missing key answers **400** (when required), a key in
use by a request still running **409**, the key with a different payload (method, path, query and
body) **422**. The first request runs the app and its response -- status, headers, body, a 500
too, as Stripe keeps them -- is stored; a retry with the key gets the stored response back with
``Idempotent-Replayed: true`` and the app is not called again. Reservation and completion are two
short transactions around the app (the "reserve, commit, effect, complete" mode in
``docs/effects.md``): an app that crashes the process leaves the key in progress until its lease.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import FleetError
from pipeline.reasons import Idempotency

from .reservation import Done, InProgress, Mismatch, Reservation
from .store import IdempotencyStore

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class IdempotencyMiddleware:
    """Wraps an ASGI app; see the module docstring for the answers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        store: IdempotencyStore,
        sessions: sessionmaker[Session],
        key_class: str,
        methods: frozenset[str] = frozenset({"POST", "PATCH"}),
        required: bool = True,
    ) -> None:
        store.key_class(key_class)  # an undeclared class is refused when the app is built
        self.app, self.store, self.sessions = app, store, sessions
        self.key_class, self.methods, self.required = key_class, methods, required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self.methods:
            await self.app(scope, receive, send)
            return
        key = _header(scope, b"idempotency-key")
        if key is None:
            if self.required:
                await _answer(
                    send, 400, Idempotency.IDEM_KEY_MISSING, "Idempotency-Key is required"
                )
                return
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        payload = {
            "m": scope["method"],
            "p": scope["path"],
            "q": scope.get("query_string", b"").decode("latin-1"),
            "b": base64.b64encode(body).decode(),
        }
        try:
            answer = await asyncio.to_thread(self._reserve, key, payload)
        except FleetError as exc:  # invalid key
            await _answer(send, 400, exc.reason, str(exc))
            return
        if isinstance(answer, InProgress):
            await _answer(
                send, 409, Idempotency.IDEM_IN_PROGRESS, "the first request is still running"
            )
        elif isinstance(answer, Mismatch):
            await _answer(
                send, 422, Idempotency.IDEM_PAYLOAD_MISMATCH, "key reused with another payload"
            )
        elif isinstance(answer, Done):
            stored = answer.value or {}
            headers = [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in stored.get("headers", [])]
            await _send(
                send,
                int(stored.get("status", 500)),
                [*headers, (b"idempotent-replayed", b"true")],
                base64.b64decode(stored.get("body", "")),
            )
        else:
            await self._first(scope, body, send, key)

    def _reserve(self, key: str, payload: Any) -> Reservation:
        with self.sessions.begin() as s:
            return self.store.reserve(s, key, payload, key_class=self.key_class)

    def _complete(self, key: str, response: dict[str, Any]) -> None:
        with self.sessions.begin() as s:
            self.store.complete(s, key, response, key_class=self.key_class)

    async def _first(self, scope: Scope, body: bytes, send: Send, key: str) -> None:
        status, headers, chunks = 500, [], []

        async def replay() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def capture(message: Message) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status, headers = int(message["status"]), list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        try:
            await self.app(scope, replay, capture)
        except Exception:
            status, headers, chunks = 500, [], [b'{"error":"internal"}']
            await asyncio.to_thread(self._complete, key, _stored(status, headers, chunks))
            raise
        await asyncio.to_thread(self._complete, key, _stored(status, headers, chunks))
        await _send(send, status, headers, b"".join(chunks))


def _stored(status: int, headers: list[Any], chunks: list[bytes]) -> dict[str, Any]:
    return {
        "status": status,
        "headers": [(bytes(k).hex(), bytes(v).hex()) for k, v in headers],
        "body": base64.b64encode(b"".join(chunks)).decode(),
    }


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if bytes(k).lower() == name:
            return bytes(v).decode("latin-1")
    return None


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(bytes(message.get("body", b"")))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _send(send: Send, status: int, headers: list[Any], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _answer(send: Send, status: int, reason: str, message: str) -> None:
    body = json.dumps({"reason": str(reason), "message": message}).encode()
    await _send(send, status, [(b"content-type", b"application/json")], body)
