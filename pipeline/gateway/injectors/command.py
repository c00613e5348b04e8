"""Inject by running a command: the body on stdin, the envelope in environment variables."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from pipeline.errors import InjectError

from .port import INJECT_FAILED, INJECT_TIMEOUT, TARGET_BUSY

BUSY_EXIT = 75  # EX_TEMPFAIL: "busy, nothing injected" -- the only exit that may be retried
STDERR_LIMIT = 2048  # bytes of stderr kept in the error (the tail: where the reason usually is)


class CommandSettings:
    """What both command modes take: the argv, the time limit of one brief, extra environment
    and the working folder (checked once, here)."""

    def __init__(
        self,
        argv: Sequence[str],
        timeout_s: float = 10.0,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv:
            raise ValueError(f"{type(self).__name__} needs a non-empty argv list")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.argv = tuple(argv)
        self.timeout_s = timeout_s
        self.env = dict(env or {})
        self.cwd = cwd


class CommandInjector(CommandSettings):
    """Runs ``argv`` once per brief (R-ACK-6: the worker's own gateway injects locally).

    The body goes to stdin; ``FLEET_MSG_ID``, ``FLEET_FROM``, ``FLEET_TO``, ``FLEET_KIND`` and
    ``FLEET_TRACE_ID`` (the brief's ``traceId``) are set. Exit 0 means injected. Exit 75 means "busy, nothing injected" (``TARGET_BUSY``,
    retriable). Any other exit is a final ``INJECT_FAILED`` with the tail of stderr. Past
    ``timeout_s`` the command's whole process group is killed (it runs in its own session, so
    helpers it started die too) and the error is a final ``INJECT_TIMEOUT``.
    """

    def inject(
        self, *, gid: str, msg_id: str, kind: str, sender: str, body: bytes, trace_id: str = ""
    ) -> None:
        context: dict[str, Any] = {
            "gid": gid,
            "msg_id": msg_id,
            "injector": "command",
            "argv0": self.argv[0],
        }
        env = os.environ | self.env
        env |= {"FLEET_MSG_ID": msg_id, "FLEET_FROM": sender, "FLEET_TO": gid, "FLEET_KIND": kind}
        if trace_id:  # the worker's own sends continue the brief's trace (`fleet send` reads it)
            env["FLEET_TRACE_ID"] = trace_id
        with tempfile.TemporaryFile() as err:  # a file, not a pipe: bounded memory, no deadlock
            try:
                proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env=env,
                    cwd=self.cwd,
                    start_new_session=True,
                )
            except (OSError, ValueError) as exc:
                raise InjectError(
                    f"cannot start {self.argv[0]!r} for {gid}: {exc}",
                    reason=INJECT_FAILED,
                    context=context,
                ) from exc
            try:
                _feed_and_wait(proc, body, self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                raise InjectError(
                    f"{self.argv[0]!r} did not finish within {self.timeout_s:g}s for {gid}; "
                    "its process group was killed (the target may hold part of the brief)",
                    reason=INJECT_TIMEOUT,
                    context=context | {"stderr": _tail(err)},
                ) from None
            finally:
                if proc.poll() is None:  # an interrupt mid-communicate: leave nothing behind
                    _kill_group(proc)
            if proc.returncode == 0:
                return
            stderr = _tail(err)
            context |= {"exit_code": proc.returncode, "stderr": stderr}
        if proc.returncode == BUSY_EXIT:
            raise InjectError(
                f"{self.argv[0]!r} reports {gid} busy (exit {BUSY_EXIT}); nothing injected",
                reason=TARGET_BUSY,
                retriable=True,
                context=context,
            )
        how = (
            f"was killed by signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exited {proc.returncode}"
        )
        raise InjectError(
            f"{self.argv[0]!r} {how} for {gid}: {stderr or '(no stderr)'}",
            reason=INJECT_FAILED,
            context=context,
        )

    def __repr__(self) -> str:
        return f"CommandInjector({list(self.argv)!r}, timeout_s={self.timeout_s:g})"


def _feed_and_wait(proc: subprocess.Popen[bytes], body: bytes, timeout_s: float) -> None:
    """Write ``body`` to the command's stdin, close it and reap the command; raises
    ``TimeoutExpired`` past ``timeout_s``. Waits on a pidfd where Linux has one: the exit wakes
    the call at once. (``communicate`` with a timeout polls the child with sleeps that grow from
    0.5 ms, which cost a fast command 1-2 ms of latency per inject.)"""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: the portable, polling way
        proc.communicate(body, timeout=timeout_s)
        return
    deadline = time.monotonic() + timeout_s
    try:
        assert proc.stdin is not None
        out = proc.stdin.fileno()
        os.set_blocking(out, False)
        view = memoryview(body)
        while view:  # a body larger than the pipe: write as the command reads, or until it exits
            exited, writable, _ = select.select([pidfd], [out], [], _left(proc, deadline))
            if exited or not writable:
                break
            try:
                view = view[os.write(out, view) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:  # the command closed stdin: what it read is its business
                break
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        if not select.select([pidfd], [], [], _left(proc, deadline))[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        proc.wait()  # exited: reaps at once
    finally:
        os.close(pidfd)


def _left(proc: subprocess.Popen[bytes], deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise subprocess.TimeoutExpired(proc.args, 0)
    return left


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # pgid == pid: the child leads its session
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdin is not None:
        with contextlib.suppress(OSError):  # a full pipe to a dead reader: nothing to flush to
            proc.stdin.close()


def _tail(err: IO[bytes]) -> str:
    size = err.seek(0, os.SEEK_END)
    err.seek(max(0, size - STDERR_LIMIT))
    text = err.read().decode("utf-8", errors="replace").strip()
    return ("..." + text) if size > STDERR_LIMIT else text
