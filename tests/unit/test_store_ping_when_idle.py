"""A pooled connection is pinged before use only when it sat idle: reused at once it costs no
round trip; a dead idle one is replaced, not handed out (R-STORE-2: a store restart is not a
failure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from pipeline.store.engine import ping_when_idle


def _engine(tmp_path: Path, idle_s: float, pings: list[Any], *, fail: int = 0) -> Any:
    engine = create_engine(f"sqlite:///{tmp_path / 'p.sqlite'}")
    failures = [fail]

    def do_ping(dbapi_conn: Any) -> bool:
        pings.append(dbapi_conn)
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("server closed the connection")
        return True

    engine.dialect.do_ping = do_ping  # type: ignore[method-assign]
    return ping_when_idle(engine, idle_s)


def test_a_connection_reused_at_once_is_not_pinged(tmp_path: Path) -> None:
    pings: list[Any] = []
    engine = _engine(tmp_path, 60.0, pings)
    for _ in range(3):
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1
    assert pings == []
    engine.dispose()


def test_an_idle_connection_is_pinged_and_a_dead_one_replaced(tmp_path: Path) -> None:
    pings: list[Any] = []
    engine = _engine(tmp_path, 0.0, pings, fail=1)
    with engine.connect() as conn:
        first = conn.connection.dbapi_connection
    with engine.connect() as conn:  # idle past 0 s: pinged, the ping fails, a fresh one is used
        assert conn.execute(text("SELECT 1")).scalar() == 1
        second = conn.connection.dbapi_connection
    assert pings == [first] and second is not first
    with engine.connect():
        pass
    assert pings[-1] is second, "the fresh one is pinged in turn once it sat idle"
    engine.dispose()
