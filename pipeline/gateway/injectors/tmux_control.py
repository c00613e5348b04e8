"""One tmux control-mode client (``tmux -C attach``): tmux commands as lines, no process each.

tmux answers every command of a line with one block, ``%begin T N F`` ... ``%end T N F`` (or
``%error T N F``, after which the rest of that line's commands do not run); anything outside a
block is a notification and is skipped. The client attaches with ``-f no-output,ignore-size``:
it receives no pane output and never sizes a window. Arguments are written double-quoted with
tmux's escapes, so text is never split into commands, expanded (``$``, ``~``) or read as a
comment.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Sequence

CLIENT_FLAGS = "no-output,ignore-size"
ATTACH_TIMEOUT_S = 5.0
_QUOTE = str.maketrans({"\\": "\\\\", '"': '\\"', "$": "\\$", "\n": "\\n", "\t": "\\t"})


class ControlUnavailable(Exception):
    """No control client could attach (no server, no such target, a tmux without the flags)."""


class ControlLost(Exception):
    """The client went away before it answered; ``sent``: the whole line had reached it."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class TmuxCommandError(Exception):
    """tmux answered a command with ``%error``; the text is tmux's message."""


def quote(arg: str) -> str:
    """``arg`` as one argument of a tmux command line."""
    return '"' + arg.translate(_QUOTE) + '"'


class ControlClient:
    """A control-mode client attached to ``target``'s session. Not thread-safe: one caller at
    a time (the injector holds a lock around :meth:`run`)."""

    def __init__(self, base: Sequence[str], target: str) -> None:
        try:
            self.proc = subprocess.Popen(
                [*base, "-C", "attach", "-t", target, "-f", CLIENT_FLAGS],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise ControlUnavailable(f"cannot run tmux: {exc}") from exc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._out = self.proc.stdout.fileno()
        self._buf = bytearray()
        try:  # the attach's own block says whether it worked
            self._block(time.monotonic() + ATTACH_TIMEOUT_S)
        except (TmuxCommandError, ControlLost, subprocess.TimeoutExpired) as exc:
            self.close()
            raise ControlUnavailable(f"tmux -C attach -t {target}: {exc}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, commands: Sequence[Sequence[str]], deadline: float) -> str:
        """Run ``commands`` as one line; their output, each block's lines ending in newline.
        Raises ``TmuxCommandError`` (the first failing command; the rest did not run),
        ``ControlLost`` or ``subprocess.TimeoutExpired``."""
        line = " ; ".join(" ".join(quote(a) for a in cmd) for cmd in commands) + "\n"
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # no newline reached it: no command ran
            raise ControlLost("the control client has exited", sent=False) from None
        return "".join(self._block(deadline) for _ in commands)

    def close(self) -> None:
        """Detach: the client exits when its input ends; killed if it does not at once."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            assert self.proc.stdout is not None
            self.proc.stdout.close()

    def _block(self, deadline: float) -> str:
        """The next command block's text (skipping notifications before it)."""
        while True:
            line = self._line(deadline)
            if line.startswith("%begin "):
                break
            if line == "%exit" or line.startswith("%exit "):
                raise ControlLost("the control client was told to exit", sent=True)
        tail = line[len("%begin ") :]
        end, error = f"%end {tail}", f"%error {tail}"
        lines: list[str] = []
        while (line := self._line(deadline)) not in (end, error):
            lines.append(line + "\n")
        if line == error:
            raise TmuxCommandError("".join(lines).strip())
        return "".join(lines)

    def _line(self, deadline: float) -> str:
        while (at := self._buf.find(b"\n")) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                raise subprocess.TimeoutExpired("tmux -C", 0)
            chunk = os.read(self._out, 65536)
            if not chunk:
                raise ControlLost("the control client has exited", sent=True)
            self._buf += chunk
        line = self._buf[:at].decode("utf-8", errors="replace")
        del self._buf[: at + 1]
        return line
