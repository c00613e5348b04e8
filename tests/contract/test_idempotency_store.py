"""Idempotency store contract (R-EFF-2): SQLite (WAL) and PostgreSQL.

Exactly one FirstUse per key under threads and two processes; stored results (a failure too)
come back as Done; 409 (InProgress) and 422 (Mismatch); an expired key starts a new request; a
crash between the effect and the commit does not repeat the effect on retry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.effects import (
    Done,
    FirstUse,
    IdempotencyStore,
    InProgress,
    KeyClass,
    KeyState,
    Mismatch,
    StoredError,
    list_keys,
)
from pipeline.errors import StoreError
from pipeline.store import make_engine, session_factory
from tests.contract.idem_racer import KEY_CLASS, apply_once, effect_rows, effects_meta

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    effects_meta.create_all(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


def _effects(engine: Engine, key: str | None = None) -> int:
    stmt = select(func.count()).select_from(effect_rows)
    if key is not None:
        stmt = stmt.where(effect_rows.c.idem_key == key)
    with engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


def test_first_use_then_in_progress_mismatch_and_stored_result(
    sessions: sessionmaker[Session],
) -> None:
    store = IdempotencyStore([KEY_CLASS])
    with sessions.begin() as s:
        assert store.reserve(s, "k", {"a": 1}, key_class="test") == FirstUse(key="k")
    with sessions.begin() as s:
        answer = store.reserve(s, "k", {"a": 1}, key_class="test")
        assert isinstance(answer, InProgress)  # 409: the first request has not finished
        assert isinstance(store.reserve(s, "k", {"a": 2}, key_class="test"), Mismatch)  # 422
    with sessions.begin() as s:
        store.complete(s, "k", {"refund": "r-1"}, key_class="test")
    with sessions.begin() as s:
        assert store.reserve(s, "k", {"a": 1}, key_class="test") == Done(
            key="k", value={"refund": "r-1"}
        )
        assert isinstance(store.reserve(s, "k", {"a": 2}, key_class="test"), Mismatch)


def test_a_stored_failure_is_returned_not_retried(sessions: sessionmaker[Session]) -> None:
    store = IdempotencyStore([KEY_CLASS])
    with sessions.begin() as s:
        assert isinstance(store.reserve(s, "f", b"p", key_class="test"), FirstUse)
        store.fail(s, "f", StoredError(reason="CARD_DECLINED", message="no"), key_class="test")
    with sessions.begin() as s:
        answer = store.reserve(s, "f", b"p", key_class="test")
    assert isinstance(answer, Done) and not answer.ok
    assert answer.error == StoredError(reason="CARD_DECLINED", message="no")


def test_complete_without_reservation_is_refused(sessions: sessionmaker[Session]) -> None:
    store = IdempotencyStore([KEY_CLASS])
    with pytest.raises(StoreError) as err, sessions.begin() as s:
        store.complete(s, "never", 1, key_class="test")
    assert err.value.reason == "IDEM_NOT_RESERVED"


def test_an_expired_key_starts_a_new_request(sessions: sessionmaker[Session]) -> None:
    clock = Clock()
    kc = KeyClass(name="short", retention_s=3600, replay_window_s=3600)
    store = IdempotencyStore([kc], clock=clock)
    with sessions.begin() as s:
        assert isinstance(store.reserve(s, "e", 1, key_class="short"), FirstUse)
        store.complete(s, "e", "first", key_class="short")
    clock.now += 3599
    with sessions.begin() as s:
        assert store.reserve(s, "e", 1, key_class="short") == Done(key="e", value="first")
    clock.now += 2
    with sessions.begin() as s:
        # past retention the old record is gone as far as callers are concerned, payload too
        answer = store.reserve(s, "e", 2, key_class="short")
        assert answer == FirstUse(key="e", attempt=2, restarted=True)
        store.complete(s, "e", "second", key_class="short")
    with sessions.begin() as s:
        assert store.reserve(s, "e", 2, key_class="short") == Done(key="e", value="second")
        assert store.purge_expired(s) == 0


def test_a_dead_holders_lease_is_taken_over_once(sessions: sessionmaker[Session]) -> None:
    clock = Clock()
    kc = KeyClass(name="lease", retention_s=None, replay_window_s=None, lease_s=10)
    store = IdempotencyStore([kc], clock=clock)
    with sessions.begin() as s:
        assert isinstance(store.reserve(s, "l", 1, key_class="lease"), FirstUse)
    clock.now += 11
    with sessions.begin() as s:
        assert isinstance(store.reserve(s, "l", 2, key_class="lease"), Mismatch)
        assert store.reserve(s, "l", 1, key_class="lease") == FirstUse(
            key="l", attempt=2, restarted=True
        )
        assert isinstance(store.reserve(s, "l", 1, key_class="lease"), InProgress)
        rows = list_keys(s, key_class="lease")
    assert [(r.key, r.state, r.attempt) for r in rows] == [("l", KeyState.IN_PROGRESS, 2)]


def test_threads_racing_for_one_key_get_exactly_one_first_use(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    store = IdempotencyStore([KEY_CLASS])
    keys = [f"t{i}" for i in range(15)]
    wins: dict[str, list[str]] = {k: [] for k in keys}
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def racer(name: str) -> None:
        try:
            barrier.wait()
            for k in keys:
                if apply_once(sessions, store, k, name):
                    wins[k].append(name)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=racer, args=(f"th{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(len(w) == 1 for w in wins.values()), wins
    assert _effects(engine) == len(keys)


def _child(*args: str) -> subprocess.Popen[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.contract.idem_racer", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_racing_get_exactly_one_first_use_per_key(
    store_url: str, engine: Engine
) -> None:
    n = 60
    start = f"{time.time() + 3.0:.3f}"  # both children import and connect first, then race
    procs = [_child("race", store_url, str(n), start) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    won = [set(json.loads(o[0])) for o in outs]
    assert won[0].isdisjoint(won[1])
    assert won[0] | won[1] == {f"k{i}" for i in range(n)}
    assert _effects(engine) == n


def test_a_crash_between_effect_and_commit_does_not_repeat_the_effect(
    store_url: str, engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-FAIL-1: the effect and its key commit together, so the retry acts once."""
    proc = _child("crash", store_url, "refund-7")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -9 and "effect-written" in out, err
    assert _effects(engine, "refund-7") == 0  # the crash took the effect and the key with it
    store = IdempotencyStore([KEY_CLASS])
    assert apply_once(sessions, store, "refund-7", "retry")  # first effective use
    assert not apply_once(sessions, store, "refund-7", "redelivery")  # now Done: not repeated
    assert _effects(engine, "refund-7") == 1
    with sessions.begin() as s:
        assert store.reserve(s, "refund-7", {"key": "refund-7"}, key_class="test") == Done(
            key="refund-7", value={"writer": "retry"}
        )


def test_fleet_idem_ls_and_show(store_url: str, sessions: sessionmaker[Session]) -> None:
    from typer.testing import CliRunner

    from pipeline.cli.main import app

    store = IdempotencyStore([KEY_CLASS])
    with sessions.begin() as s:
        store.reserve(s, "shown", {"p": 1}, key_class="test")
        store.complete(s, "shown", {"refund": "r-9"}, key_class="test")
        store.reserve(s, "held", {"p": 2}, key_class="test")
    runner = CliRunner()
    out = runner.invoke(
        app, ["idem", "ls", "--store-url", store_url, "--json", "--state", "in_progress"]
    )
    assert out.exit_code == 0, out.output
    assert [r["key"] for r in json.loads(out.output)] == ["held"]
    out = runner.invoke(app, ["idem", "show", "shown", "--store-url", store_url])
    assert out.exit_code == 0, out.output
    (rec,) = json.loads(out.output)
    assert rec["state"] == "succeeded" and rec["result"] == {"value": {"refund": "r-9"}}
    out = runner.invoke(app, ["idem", "show", "nope", "--store-url", store_url])
    assert out.exit_code == 1 and "IDEM_KEY_UNKNOWN" in out.output
