"""The gateway process: its threads, their supervision, and a clean or loud stop.

Threads: the inbox runtime (the dual ack model), the outbox relay (own supervision: restarted
after a crash, so a broker outage never reaches the execution path), the roster follower and
presence heartbeats, per-entity injection workers, and the maintenance ticker. A fatal runtime
error (fenced by a second gateway with the same host id, offsets lost to retention) stops the
whole gateway and is reported as the exit reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import FleetError
from pipeline.kafka.errors import BrokerErrorClass, classify, kafka_error_of
from pipeline.support.retrying import Backoff

log = logging.getLogger(__name__)


@dataclass
class Supervised:
    """A named loop run in a thread. A retriable error (a :class:`FleetError` with
    ``retriable``, or a broker error :func:`pipeline.kafka.errors.classify` calls transient) is
    waited out: the loop restarts after a backoff that doubles up to ``max_backoff_s``
    (:class:`pipeline.support.retrying.Backoff`, no jitter). Any other error restarts it only
    when ``restart``; else the gateway stops, loudly."""

    name: str
    body: Callable[[threading.Event], None]
    restart: bool = True
    # stops after every other loop and the ``on_quiesce`` hooks, so what they committed still
    # goes out (the relay: the receipts of a stop's last injects)
    last: bool = False
    backoff_s: float = 1.0
    max_backoff_s: float = 10.0
    # ends a wait that does not look at the stop event at once (the relay's idle wait on the
    # WAL's watch, docs/outbox.md invariant 9): called right after its stop is set
    wake: Callable[[], None] | None = None
    thread: threading.Thread | None = None
    crashes: int = 0


@dataclass
class Gateway:
    host: str
    loops: list[Supervised]
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    # run once the loops that are not ``last`` stopped, before the ``last`` ones stop
    on_quiesce: list[Callable[[], None]] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    last_stop: threading.Event = field(default_factory=threading.Event)
    fatal: BaseException | None = None

    def start(self) -> Gateway:
        for loop in self.loops:
            loop.thread = threading.Thread(
                target=self._supervise, args=(loop,), name=f"gw-{loop.name}", daemon=True
            )
            loop.thread.start()
        return self

    def _supervise(self, loop: Supervised) -> None:
        backoff = Backoff(initial_s=loop.backoff_s, max_s=loop.max_backoff_s)
        failures = 0  # in this episode of crashes
        stop = self.last_stop if loop.last else self.stop_event
        while not stop.is_set():
            started = time.monotonic()
            try:
                loop.body(stop)
                return
            except FleetError as exc:
                if not exc.retriable:
                    log.error("gateway %s: %s stopped: %s", self.host, loop.name, exc)
                    self.fatal = exc
                    self.stop_event.set()
                    return
                loop.crashes += 1
                log.warning("gateway %s: %s failed (%s); restarting", self.host, loop.name, exc)
            except Exception as exc:
                loop.crashes += 1
                broker = kafka_error_of(exc) is not None
                if broker and classify(exc) is BrokerErrorClass.TRANSIENT:
                    log.warning(
                        "gateway %s: %s met a transient broker error (%s); restarting in %.1f s",
                        self.host,
                        loop.name,
                        exc,
                        backoff.delay(failures + 1),
                    )
                else:
                    log.exception("gateway %s: %s crashed", self.host, loop.name)
                    if not loop.restart or (broker and classify(exc) is BrokerErrorClass.FATAL):
                        self.fatal = exc
                        self.stop_event.set()
                        return
            if time.monotonic() - started > 60:
                failures = 0  # it had been running: a new episode
            failures += 1
            stop.wait(backoff.delay(failures))

    def fail(self, exc: BaseException) -> None:
        """Stop the gateway with ``exc`` as its exit reason: a refusal no loop can wait out (a
        login refused after start, docs/security.md). Safe from any thread or client callback."""
        if self.fatal is None:
            self.fatal = exc
        log.error("gateway %s: stopping: %s", self.host, exc)
        self.stop_event.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop in order: every loop but the ``last`` ones, then the ``on_quiesce`` hooks (the
        inject workers finish their burst), then the ``last`` loops (the relay ships what all
        of them committed), then the ``on_stop`` hooks; ``timeout`` bounds the joins."""
        self.stop_event.set()
        t0 = time.monotonic()
        deadline = t0 + timeout
        log.info("gateway %s: stopping", self.host)
        first = [loop for loop in self.loops if not loop.last]
        self._wake(first)
        self._join(first, deadline)
        self._run_hooks(self.on_quiesce)
        self.last_stop.set()
        last = [loop for loop in self.loops if loop.last]
        self._wake(last)
        self._join(last, deadline)
        stuck = [loop.name for loop in self.loops if loop.thread and loop.thread.is_alive()]
        if stuck:  # a slow stop says which loop held it (the supervisor's SIGKILL may come next)
            log.warning("gateway %s: %s still running %.1f s after stop", self.host,
                        ", ".join(stuck), time.monotonic() - t0)  # fmt: skip
        self._run_hooks(self.on_stop)
        log.info("gateway %s: stopped in %.1f s", self.host, time.monotonic() - t0)

    def _wake(self, loops: list[Supervised]) -> None:
        self._run_hooks([loop.wake for loop in loops if loop.wake is not None])

    @staticmethod
    def _join(loops: list[Supervised], deadline: float) -> None:
        for loop in loops:
            if loop.thread is not None:
                loop.thread.join(max(0.1, deadline - time.monotonic()))

    def _run_hooks(self, hooks: list[Callable[[], None]]) -> None:
        for fn in hooks:
            try:
                fn()
            except Exception:
                log.exception("gateway %s: stop hook failed", self.host)

    def wait(self, poll_s: float = 0.2) -> BaseException | None:
        """Block until stopped (signal or fatal error); returns the fatal error, if any. The
        timeout is how soon a Python signal handler runs when the kernel gave the signal to
        another thread: it runs on this one, between bytecodes (pipeline/signals.py)."""
        while not self.stop_event.wait(poll_s):
            pass
        return self.fatal

    def status(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "loops": {
                loop.name: {
                    "alive": bool(loop.thread and loop.thread.is_alive()),
                    "crashes": loop.crashes,
                }
                for loop in self.loops
            },
            "fatal": str(self.fatal) if self.fatal else None,
        }
