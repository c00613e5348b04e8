"""The Idempotency-Key ASGI middleware (R-EFF-3; the expired IETF draft's 400/409/422)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.effects import IdempotencyStore, KeyClass
from pipeline.effects.asgi import IdempotencyMiddleware
from pipeline.store import make_engine, session_factory


class App:
    """Counts calls; ``gate`` holds a request open so a concurrent one can see 409."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        body = (await receive())["body"]
        if self.gate is not None:
            await self.gate.wait()
        status = 500 if body == b"boom" else 201
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"x-call", str(self.calls).encode())],
            }
        )
        await send({"type": "http.response.body", "body": b"refund " + body})


async def call(
    app: Any, body: bytes, key: str | None, method: str = "POST"
) -> tuple[int, dict[bytes, bytes], bytes]:
    headers = [] if key is None else [(b"idempotency-key", key.encode())]
    scope = {
        "type": "http",
        "method": method,
        "path": "/refunds",
        "query_string": b"",
        "headers": headers,
    }
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"]), dict(sent[0]["headers"]), sent[1]["body"]


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


def _middleware(engine: Engine) -> tuple[App, IdempotencyMiddleware]:
    sessions: sessionmaker[Session] = session_factory(engine)
    store = IdempotencyStore([KeyClass(name="http", retention_s=None, replay_window_s=None)])
    inner = App()
    return inner, IdempotencyMiddleware(inner, store=store, sessions=sessions, key_class="http")


def test_stored_response_400_409_422(engine: Engine) -> None:
    inner, app = _middleware(engine)

    async def scenario() -> None:
        assert (await call(app, b"7", None))[0] == 400
        status, headers, body = await call(app, b"7", "k1")
        assert (status, body, inner.calls) == (201, b"refund 7", 1)
        status, headers, body = await call(app, b"7", "k1")  # a retry: the stored response
        assert (status, body, inner.calls) == (201, b"refund 7", 1)
        assert headers[b"idempotent-replayed"] == b"true" and headers[b"x-call"] == b"1"
        status, _h, body = await call(app, b"8", "k1")
        assert status == 422 and b"IDEM_PAYLOAD_MISMATCH" in body
        assert (await call(app, b"boom", "k2"))[0] == 500
        assert (await call(app, b"boom", "k2"))[0] == 500 and inner.calls == 2  # 500 kept
        inner.gate = asyncio.Event()
        first = asyncio.create_task(call(app, b"9", "k3"))
        while inner.calls < 3:
            await asyncio.sleep(0.01)
        status, _h, body = await call(app, b"9", "k3")
        assert status == 409 and b"IDEM_IN_PROGRESS" in body
        inner.gate.set()
        assert (await first)[0] == 201
        assert (await call(app, b"x", None, method="GET"))[0] == 201  # GET needs no key

    asyncio.run(scenario())
