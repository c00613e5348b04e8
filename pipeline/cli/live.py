"""A full-screen view refreshed every second, with single-key commands: ``fleet top``,
``fleet lag --watch``, ``fleet roster --watch``.

Rich's ``Live`` on the alternate screen (plain ANSI: works in any terminal, over SSH and in
tmux) and a key reader on stdin in cbreak mode (``termios``: keys arrive one by one, unechoed,
and Ctrl-C still interrupts). Without a terminal on stdin no keys are read; ``q`` or Ctrl-C
quits. The terminal's mode is restored on every way out.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator

from rich.console import RenderableType
from rich.live import Live

from .output import console

ESC = "\x1b"


@contextlib.contextmanager
def cbreak_keys() -> Iterator[Callable[[float], str | None]]:
    """A ``read_key(timeout_s)`` for stdin in cbreak mode; it returns ``None`` on timeout (and
    always, without a terminal on stdin)."""
    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    if fd is None:

        def no_keys(timeout_s: float) -> str | None:
            time.sleep(timeout_s)
            return None

        yield no_keys
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read_key(timeout_s: float) -> str | None:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            return None
        key = os.read(fd, 1).decode("utf-8", "replace")
        if key == ESC:  # an escape sequence (arrow keys): swallow the rest, report ESC
            while select.select([fd], [], [], 0.01)[0]:
                os.read(fd, 16)
        return key

    try:
        yield read_key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run_live(
    refresh: Callable[[], None],
    render: Callable[[], RenderableType],
    *,
    interval_s: float = 1.0,
    on_key: Callable[[str], None] | None = None,
) -> None:
    """Call ``refresh`` every ``interval_s`` and show ``render()``, until ``q`` or Ctrl-C.
    A key other than ``q`` goes to ``on_key`` and the screen is redrawn at once."""
    with (
        cbreak_keys() as read_key,
        Live(render(), console=console, screen=True, auto_refresh=False) as live,
    ):
        due = 0.0
        try:
            while True:
                now = time.monotonic()
                if now >= due:
                    refresh()
                    due = time.monotonic() + interval_s
                    live.update(render(), refresh=True)
                key = read_key(max(0.0, min(0.2, due - time.monotonic())))
                if key is None:
                    continue
                if key == "q":
                    return
                if on_key is not None:
                    on_key(key)
                    live.update(render(), refresh=True)
        except KeyboardInterrupt:
            return
