"""Stopping a long-running command on SIGTERM / SIGINT without a lock in the signal handler.

A Python signal handler runs on the main thread between two bytecodes -- possibly while that
thread holds a lock, or inside another handler. ``threading.Event.set()`` takes the event's
(non-reentrant) lock, so a handler that calls it can deadlock the process forever: a second
SIGTERM arriving while the first handler's ``set()`` held the lock did exactly that to a
``fleet gateway run`` (the ``twin-host`` chaos scenario, docs/chaos.md, at 20 repetitions: a
supervisor that terminates and then stops sends two; the gateway ignored both for 20 s until SIGKILL, and faulthandler's
dump showed ``Event.set`` inside ``Event.set`` on the main thread).

:func:`stop_on_signals` keeps the handler to one ``os.write`` on a pipe; a daemon thread blocked
on the pipe's other end sets the event from ordinary code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(
    event: threading.Event,
    signals: Iterable[int] = STOP_SIGNALS,
    *,
    then: Iterable[Callable[[], None]] = (),
) -> None:
    """Set ``event`` once any of ``signals`` arrives (main thread only: where handlers are
    installed), then call each of ``then`` (wake what does not wait on the event). Further
    signals are absorbed: the event stays set."""
    wakes = tuple(then)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def handler(_signum: int, _frame: FrameType | None) -> None:
        # a full pipe (BlockingIOError) means a byte is already waiting: nothing to add
        with contextlib.suppress(OSError):
            os.write(write_end, b"\0")

    def watch() -> None:
        os.read(read_end, 1)
        event.set()
        for wake in wakes:
            wake()

    threading.Thread(target=watch, name="stop-signals", daemon=True).start()
    for s in signals:
        signal.signal(s, handler)


def interrupt_on_sigterm() -> None:
    """SIGTERM raises ``KeyboardInterrupt`` in the main thread, as SIGINT does (main thread
    only). For commands that own child processes (``fleet chaos run``, ``fleet lab run``): their
    ``finally`` blocks stop the gateways, members and brokers they started; by default a
    SIGTERM (``timeout``, a CI cancel) ended the command at once and left those running. Only
    the first one interrupts: a second must not cut that clean-up short."""

    def interrupt_once(_signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt_once)
