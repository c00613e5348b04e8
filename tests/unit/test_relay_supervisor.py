"""The long-running relay's own supervision (R-OUT-2): a failing pass is logged and waited out
with a backoff that grows while passes keep failing and starts over after one succeeds; a stop
ends the wait; no failure escapes ``run_forever``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import BrokerError
from pipeline.outbox import Relay
from pipeline.outbox import relay as relay_module
from pipeline.store import make_engine
from tests.unit.relay_fakes import QuietProducer


def _relay(tmp_path: Path, *, backoff_initial_s: float, backoff_max_s: float) -> tuple[Any, Relay]:
    """A relay on a fresh SQLite store whose producer never fails (the passes are replaced)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'a.sqlite'}")
    relay = Relay(
        engine=engine,
        bootstrap="unused:1",
        producer_factory=lambda _conf: QuietProducer(),
        backoff_initial_s=backoff_initial_s,
        backoff_max_s=backoff_max_s,
    )
    return engine, relay


def test_failed_passes_back_off_growing_and_a_success_starts_the_backoff_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-OUT-2: three failed passes wait 1, 2, 4 x the initial backoff; after a pass that
    succeeds the next failure waits the initial backoff again; the loop ends at the stop."""
    engine, relay = _relay(tmp_path, backoff_initial_s=0.001, backoff_max_s=1.0)
    stop = threading.Event()
    outcomes: list[str] = ["fail", "fail", "fail", "ok", "fail", "stop"]
    reported: list[int] = []

    def one_pass() -> int:
        outcome = outcomes.pop(0)
        if outcome == "stop":
            stop.set()
            return 0
        if outcome == "fail":
            raise BrokerError("injected")
        return 1  # shipped something: no idle wait before the next pass

    monkeypatch.setattr(relay, "_one_pass", one_pass)
    monkeypatch.setattr(
        relay_module, "report_failure", lambda _exc, attempt, _delay: reported.append(attempt)
    )
    thread = threading.Thread(target=relay.run_forever, args=(stop,), daemon=True)
    thread.start()
    thread.join(10)
    engine.dispose()
    assert not thread.is_alive(), "the stop ended run_forever"
    assert outcomes == []
    assert reported == [1, 2, 3, 1]


def test_a_stop_during_the_backoff_ends_run_forever_without_raising(tmp_path: Path) -> None:
    """R-OUT-2: a pass failing for ever never escapes; a stop ends the backoff wait."""
    engine, relay = _relay(tmp_path, backoff_initial_s=30.0, backoff_max_s=30.0)
    stop = threading.Event()
    failed = threading.Event()

    def one_pass() -> int:
        failed.set()
        raise RuntimeError("a bug in a pass")

    relay._one_pass = one_pass  # type: ignore[method-assign]
    thread = threading.Thread(target=relay.run_forever, args=(stop,), daemon=True)
    thread.start()
    assert failed.wait(10)
    stop.set()
    thread.join(10)
    engine.dispose()
    assert not thread.is_alive()
