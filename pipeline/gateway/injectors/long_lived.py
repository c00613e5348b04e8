"""Inject through one long-lived child: framed briefs on its stdin, answers on its stdout.

The one-shot :class:`~.command.CommandInjector` forks and execs a process per brief; this one
starts ``argv`` once and writes one frame per brief (:mod:`.framing`). Forward path, at-most-once
(R-ACK-6): a brief is written once, to one child. When the child dies or breaks the protocol
after it was handed a whole frame, nobody knows whether it acted: that brief raises
:class:`~.port.InjectUncertainError` (reported to its sender as "may have been
injected", like a crash mid-inject) and is never written again; the next brief starts a new child.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.errors import InjectError

from . import framing
from .command import CommandSettings
from .port import INJECT_FAILED, INJECT_TIMEOUT, TARGET_BUSY, InjectUncertainError

STOP_GRACE_S = 1.0  # on close: how long the child may take to exit after its stdin ends


class LongLivedCommandInjector(CommandSettings):
    """Runs ``argv`` once and hands it one framed brief after another (``mode = "long-lived"``).

    Each brief is a frame on the child's stdin; its answer line says ``ok`` (injected),
    ``retry`` (``TARGET_BUSY``, nothing injected) or ``error`` (``INJECT_FAILED``). No answer
    within ``timeout_s``: the child's process group is killed, ``INJECT_TIMEOUT``. The child
    exits, or writes something that is not the answer, after it got the whole frame: the brief
    is *uncertain* (``InjectUncertainError``), never re-sent. A child that is gone before the
    frame is written is restarted first; a frame cut short by the child's death was never
    whole, so nothing was injected: ``INJECT_FAILED``. The child's stderr is the gateway's.
    """

    def __init__(
        self,
        argv: Sequence[str],
        timeout_s: float = 10.0,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        super().__init__(argv, timeout_s, env=env, cwd=cwd)
        self.starts = 0  # children started so far (a restart count, for tests and diagnostics)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._held: list[subprocess.Popen[bytes]] = []  # the child, ended when self is collected
        weakref.finalize(self, _end_all, self._held)
        self._buf = bytearray()
        self._ready = select.poll()  # the running child's stdout (set when it starts)

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None:
        frame = framing.request(
            msg_id=msg_id, sender=sender, to=gid, kind=kind, body=body, trace_id=trace_id
        )
        with self._lock:
            proc = self._child(gid, msg_id)
            deadline = time.monotonic() + self.timeout_s
            try:
                whole = self._write(proc, frame, deadline)
                if not whole:
                    self._reap()
                    raise InjectError(
                        f"{self.argv[0]!r} exited before it took the brief for {gid}; "
                        "nothing injected",
                        reason=INJECT_FAILED,
                        context=self._context(gid, msg_id),
                    )
                line = self._read_line(proc, deadline)
            except subprocess.TimeoutExpired:
                context = self._context(gid, msg_id)
                self._kill()
                raise InjectError(
                    f"{self.argv[0]!r} did not answer within {self.timeout_s:g}s for {gid}; "
                    "its process group was killed (the target may hold part of the brief)",
                    reason=INJECT_TIMEOUT,
                    context=context,
                ) from None
            except BaseException:  # an interrupt mid-exchange: the child's state is unknown
                self._kill()
                raise
            if line == framing.ok_line(msg_id):  # the common answer: no JSON parse
                return
            context = self._context(gid, msg_id)
            if line is None:
                code = self._reap()
                raise InjectUncertainError(
                    f"{self.argv[0]!r} died (exit {code}) holding the brief for {gid}; "
                    "it may have been injected",
                    context=context | {"exit_code": code},
                )
            try:
                got = framing.parse_answer(line)
                if got.msg_id != msg_id:
                    raise framing.FrameError(f"answer names {got.msg_id!r}, not {msg_id!r}")
            except framing.FrameError as exc:
                self._kill()
                raise InjectUncertainError(
                    f"{self.argv[0]!r} broke the protocol for {gid} ({exc}); it was restarted "
                    "and the brief may have been injected",
                    context=context,
                ) from None
        if got.status == framing.OK:
            return
        if got.status == framing.RETRY:
            raise InjectError(
                f"{self.argv[0]!r} reports {gid} busy; nothing injected",
                reason=TARGET_BUSY,
                retriable=True,
                context=context,
            )
        raise InjectError(
            f"{self.argv[0]!r} failed for {gid}: {got.error or '(no reason given)'}",
            reason=INJECT_FAILED,
            context=context | {"error": got.error[-2048:]},
        )

    def close(self) -> None:
        """End the child: its stdin closes (a child exits at the end of input), then, past a
        short grace, its process group is killed."""
        with self._lock:
            self._proc = None
            _end_all(self._held)

    def __repr__(self) -> str:
        return f"LongLivedCommandInjector({list(self.argv)!r}, timeout_s={self.timeout_s:g})"

    def _context(self, gid: str, msg_id: str) -> dict[str, Any]:
        """An error's context (built only for an error: a brief that lands needs none)."""
        return {
            "gid": gid,
            "msg_id": msg_id,
            "injector": "command",
            "argv0": self.argv[0],
            "mode": "long-lived",
        }

    # -- the child ------------------------------------------------------------------------

    def _child(self, gid: str, msg_id: str) -> subprocess.Popen[bytes]:
        """The running child, started when there is none, the last one has exited, or it wrote
        out of turn (an answer nobody asked for: it breaks the one-answer-per-frame rule)."""
        if self._proc is not None and self._proc.poll() is None:
            if not self._buf and not self._ready.poll(0):
                return self._proc
            self._kill()  # nothing of this brief was written to it yet
        self._reap()
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=os.environ | self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            raise InjectError(
                f"cannot start {self.argv[0]!r} for {gid}: {exc}",
                reason=INJECT_FAILED,
                context=self._context(gid, msg_id),
            ) from exc
        assert proc.stdin is not None and proc.stdout is not None
        os.set_blocking(proc.stdin.fileno(), False)
        self._ready = select.poll()  # the child's stdout: readable (or ended) -- one fd, kept
        self._ready.register(proc.stdout.fileno(), select.POLLIN)
        self._proc = proc
        self._held[:] = [proc]
        self._buf.clear()
        self.starts += 1
        return proc

    def _write(self, proc: subprocess.Popen[bytes], frame: bytes, deadline: float) -> bool:
        """Write the whole frame; False when the child closed its stdin (or died) first."""
        assert proc.stdin is not None
        out = proc.stdin.fileno()
        view = memoryview(frame)
        while view:
            try:
                view = view[os.write(out, view) :]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                return False
            if not select.select([], [out], [], _left(deadline))[1]:
                raise subprocess.TimeoutExpired(self.argv, self.timeout_s)
        return True

    def _read_line(self, proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
        """The child's next answer line; None when its stdout ends (it died)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while (end := self._buf.find(b"\n")) < 0:
            if len(self._buf) > framing.MAX_ANSWER_BYTES:
                return bytes(self._buf)  # not an answer: parse_answer says so
            if not self._ready.poll(_left(deadline) * 1000.0):
                raise subprocess.TimeoutExpired(self.argv, self.timeout_s)
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line = bytes(self._buf[: end + 1])
        del self._buf[: end + 1]
        return line

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        self._held.clear()
        if proc is not None:
            _kill_group(proc)
            _close_pipes(proc)

    def _reap(self) -> int | None:
        """Forget an exited (or exiting) child; its exit code."""
        proc, self._proc = self._proc, None
        self._held.clear()
        if proc is None:
            return None
        try:
            code = proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # stdout closed but still running: make sure
            _kill_group(proc)
            code = proc.returncode
        _close_pipes(proc)
        return code


def _end_all(children: list[subprocess.Popen[bytes]]) -> None:
    for proc in children:
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
        _close_pipes(proc)
    children.clear()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise subprocess.TimeoutExpired("child", 0)
    return left


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # pgid == pid: the child leads its session
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
