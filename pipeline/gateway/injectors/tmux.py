"""Inject into a tmux pane, gated by a status probe so only an idle pane is typed into."""

from __future__ import annotations

import re
import subprocess
import threading
import time
import unicodedata
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pipeline.errors import InjectError

from .port import (
    INJECT_BODY_INVALID,
    INJECT_FAILED,
    INJECT_TIMEOUT,
    TARGET_BUSY,
    InjectUncertainError,
)
from .tmux_control import ControlClient, ControlLost, ControlUnavailable, TmuxCommandError

SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "ash", "busybox", "nu"}
)
MAX_BODY_BYTES = 256 * 1024  # a brief, not a file transfer: a terminal is not a bulk channel
CHUNK_CHARS = 2048  # per tmux call: at most 8 KiB of UTF-8, well under tmux's message limit
RECONNECT_S = 5.0  # after a failed attach, the process-per-call way for this long
_FORMAT = "#{pane_id}\t#{pane_current_command}\t#{pane_in_mode}\t#{pane_dead}\t#{pane_input_off}"


@dataclass(frozen=True, kw_only=True)
class PaneStatus:
    """What the probe saw. ``idle`` is the gate; ``why`` says what decided it."""

    pane_id: str
    command: str
    last_line: str
    idle: bool
    why: str


class TmuxInjector:
    """Types a brief into a tmux pane: R-ACK-6: the inject is status-gated.

    Before typing, a probe (``capture-pane`` then ``display``, in one tmux call that fails when
    the pane does not exist) decides whether the pane is idle: with ``idle_pattern``, the last
    non-blank line of the screen must match it (for agent TUIs, whose process never changes);
    without, the pane's foreground command must be a shell. A pane in copy mode is busy. Busy
    raises ``TARGET_BUSY`` (retriable: nothing was typed). The text goes with
    ``send-keys -l`` (literal: a body saying "C-c" or "Enter" types those letters) to the pane id
    the probe resolved, then ``Enter``. Bodies must be UTF-8 text without control characters
    other than newline and tab (``INJECT_BODY_INVALID``); trailing newlines are dropped because
    ``Enter`` follows.

    With ``control`` (the default) every tmux command goes over one control-mode client
    (:mod:`.tmux_control`) held for the injector's life, not a ``tmux`` process per call. When
    it cannot attach, calls run as processes (a new attach is tried after ``RECONNECT_S``);
    when it dies, the next call attaches a new one. A client lost after it was handed keys to
    type leaves them *uncertain* (``InjectUncertainError``): they are never typed again.
    """

    def __init__(
        self,
        pane: str,
        idle_pattern: str | None = None,
        *,
        socket: str | None = None,
        timeout_s: float = 10.0,
        idle_commands: Collection[str] = SHELLS,
        tmux: str = "tmux",
        control: bool = True,
    ) -> None:
        self.pane = pane
        self.idle_pattern = re.compile(idle_pattern) if idle_pattern is not None else None
        self.timeout_s = timeout_s
        self.idle_commands = frozenset(idle_commands)
        self.base = (tmux, "-L", socket) if socket else (tmux,)
        self.control = control
        self.attaches = 0  # control clients attached so far (diagnostics, tests)
        self._client: ControlClient | None = None
        self._held: list[ControlClient] = []  # the attached client, closed when self is collected
        weakref.finalize(self, _close_all, self._held)
        self._attach_at = 0.0  # monotonic time before which no new attach is tried
        self._lock = threading.Lock()

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None:
        context: dict[str, Any] = {"gid": gid, "msg_id": msg_id, "injector": "tmux"}
        context["pane"] = self.pane
        text = check_text(body, context)
        status = self.status(context)
        if not status.idle:
            raise InjectError(
                f"pane {self.pane} for {gid} is busy ({status.why}); nothing typed",
                reason=TARGET_BUSY,
                retriable=True,
                context=context | {"why": status.why},
            )
        pane = status.pane_id
        calls = [
            [["send-keys", "-t", pane, "-l", "--", text[i : i + CHUNK_CHARS]]]
            for i in range(0, len(text), CHUNK_CHARS)
        ]
        # Enter rides in the same tmux call as the last chunk: one round trip fewer, and no
        # other client's keys can land between the text and its Enter.
        enter = ["send-keys", "-t", pane, "Enter"]
        if calls:
            calls[-1].append(enter)
        for commands in calls or [[enter]]:
            self._run(commands, context, typing=True)

    def status(self, context: dict[str, Any] | None = None) -> PaneStatus:
        """Probe the pane; raises ``INJECT_FAILED`` when it is missing, dead or input-disabled."""
        context = context if context is not None else {"pane": self.pane, "injector": "tmux"}
        out = self._run(
            [
                ["capture-pane", "-p", "-J", "-t", self.pane],
                ["display", "-p", "-t", self.pane, _FORMAT],
            ],
            context,
        )
        *screen, probe = out.rstrip("\n").split("\n")
        fields = probe.split("\t")
        if len(fields) != 5:
            raise InjectError(f"unexpected tmux probe output {probe!r}", context=context)
        pane_id, command, in_mode, dead, input_off = fields
        last = next((line.rstrip() for line in reversed(screen) if line.strip()), "")
        if dead == "1" or input_off == "1":
            what = "its process has exited" if dead == "1" else "its input is disabled"
            raise InjectError(f"pane {self.pane} cannot take input: {what}", context=context)
        if in_mode == "1":
            return PaneStatus(
                pane_id=pane_id,
                command=command,
                last_line=last,
                idle=False,
                why="pane is in copy mode",
            )
        if self.idle_pattern is not None:
            idle = self.idle_pattern.search(last) is not None
            why = f"last line {last!r} {'matches' if idle else 'does not match'} idle_pattern"
        else:
            idle = command.lstrip("-").rsplit("/", 1)[-1] in self.idle_commands
            why = f"running {command!r}" + (" (a shell)" if idle else "")
        return PaneStatus(pane_id=pane_id, command=command, last_line=last, idle=idle, why=why)

    def close(self) -> None:
        """Detach the control client (if one is attached)."""
        with self._lock:
            self._drop()

    def _run(
        self, commands: list[list[str]], context: dict[str, Any], *, typing: bool = False
    ) -> str:
        """Run ``commands`` as one tmux call; their output. ``typing``: they type keys, so a
        control client lost after it took them leaves the inject uncertain."""
        with self._lock:
            client = self._attached()
            if client is not None:
                try:
                    return client.run(commands, time.monotonic() + self.timeout_s)
                except TmuxCommandError as exc:
                    raise self._failed(commands, str(exc), context) from None
                except subprocess.TimeoutExpired:
                    self._drop()
                    raise self._timeout(commands, context) from None
                except ControlLost as lost:
                    self._drop()
                    if typing and lost.sent:
                        raise InjectUncertainError(
                            f"the tmux control client died while typing into {self.pane}; "
                            "the keys may have been typed",
                            context=context,
                        ) from None
                    # a probe (nothing typed), or the line never reached tmux: run it as a process
        return self._run_process(commands, context)

    def _attached(self) -> ControlClient | None:
        if not self.control:
            return None
        if self._client is not None:
            if self._client.alive():
                return self._client
            self._drop()
        if time.monotonic() < self._attach_at:
            return None
        try:
            self._client = ControlClient(self.base, self.pane)
        except ControlUnavailable:
            self._attach_at = time.monotonic() + RECONNECT_S
            return None
        self._held[:] = [self._client]
        self.attaches += 1
        return self._client

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._held.clear()

    def _run_process(self, commands: list[list[str]], context: dict[str, Any]) -> str:
        argv = list(self.base)
        for i, command in enumerate(commands):
            argv += ([";"] if i else []) + [_escape(a) for a in command]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise self._timeout(commands, context) from None
        except OSError as exc:
            raise InjectError(
                f"cannot run tmux: {exc}", reason=INJECT_FAILED, context=context
            ) from exc
        stderr = proc.stderr.decode("utf-8", errors="replace").strip()
        if proc.returncode != 0:
            raise self._failed(commands, stderr or f"exit {proc.returncode}", context)
        return proc.stdout.decode("utf-8", errors="replace")

    def _failed(self, commands: list[list[str]], why: str, context: dict[str, Any]) -> InjectError:
        return InjectError(
            f"tmux {commands[0][0]} on pane {self.pane} failed: {why}",
            reason=INJECT_FAILED,
            context=context | {"stderr": why[-2048:]},
        )

    def _timeout(self, commands: list[list[str]], context: dict[str, Any]) -> InjectError:
        return InjectError(
            f"tmux {commands[0][0]} on {self.pane} took longer than {self.timeout_s:g}s",
            reason=INJECT_TIMEOUT,
            context=context,
        )

    def __repr__(self) -> str:
        return f"TmuxInjector({self.pane!r}, socket={self.base[2:]!r})"


def _close_all(clients: list[ControlClient]) -> None:
    for client in clients:
        client.close()
    clients.clear()


def check_text(body: bytes, context: dict[str, Any]) -> str:
    """The body as text a terminal can take, or ``INJECT_BODY_INVALID`` saying why not."""
    if len(body) > MAX_BODY_BYTES:
        raise _invalid(
            f"body is {len(body)} bytes; a tmux inject takes at most {MAX_BODY_BYTES}", context
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(f"body is not UTF-8 text (byte {exc.start})", context) from None
    for pos, char in enumerate(text):
        if char not in "\n\t" and unicodedata.category(char) == "Cc":
            # An escape or control byte would drive the terminal, not be read by the agent.
            raise _invalid(f"body has control character U+{ord(char):04X} at index {pos}", context)
    return text.rstrip("\n")


def _invalid(message: str, context: dict[str, Any]) -> InjectError:
    return InjectError(message, reason=INJECT_BODY_INVALID, context=context)


def _escape(chunk: str) -> str:
    # tmux splits its argv into commands at an argument ending in ";", and turns a final "\;"
    # into a literal ";". So a chunk ending in ";" gets a backslash before that last ";".
    return chunk[:-1] + "\\;" if chunk.endswith(";") else chunk
