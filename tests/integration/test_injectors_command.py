"""CommandInjector against real processes: stdin, environment, exit codes, timeouts."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from pipeline.errors import InjectError
from pipeline.gateway.injectors import CommandInjector
from pipeline.gateway.injectors.command import STDERR_LIMIT

ARGS = {"gid": "B-w1", "msg_id": "m-42", "kind": "SEND", "sender": "A-main"}


def sh(script: str, timeout_s: float = 10.0) -> CommandInjector:
    return CommandInjector(["sh", "-c", script], timeout_s)


def test_body_on_stdin_and_envelope_in_env(tmp_path: Path) -> None:
    out = tmp_path / "out"
    body = "brief: build it\nline two ü\n".encode()
    script = f'cat > {out}; printf "%s|%s|%s|%s" "$FLEET_MSG_ID" "$FLEET_FROM" "$FLEET_TO" "$FLEET_KIND" > {out}.env'
    sh(script).inject(body=body, **ARGS)
    assert out.read_bytes() == body
    assert Path(f"{out}.env").read_text() == "m-42|A-main|B-w1|SEND"


def test_large_body_to_a_reader_arrives_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    body = os.urandom(1 << 20)  # bigger than a pipe buffer
    sh(f"cat > {out}").inject(body=body, **ARGS)
    assert out.read_bytes() == body


def test_non_zero_exit_is_final_inject_failed_with_bounded_stderr() -> None:
    """Forward path, at-most-once (R-ACK-6): a failed command is reported, never retried."""
    script = f"yes noise | head -c {STDERR_LIMIT * 4} >&2; echo the-real-reason >&2; exit 3"
    with pytest.raises(InjectError) as info:
        sh(script).inject(body=b"x", **ARGS)
    err = info.value
    assert (err.reason, err.retriable, err.context["exit_code"]) == ("INJECT_FAILED", False, 3)
    assert err.context["stderr"].endswith("the-real-reason")
    assert len(err.context["stderr"]) <= STDERR_LIMIT + 3
    assert "exited 3" in str(err)


def test_exit_75_means_busy_and_retriable() -> None:
    with pytest.raises(InjectError) as info:
        sh("cat >/dev/null; exit 75").inject(body=b"x", **ARGS)
    assert (info.value.reason, info.value.retriable) == ("TARGET_BUSY", True)


def test_a_command_that_ignores_stdin_still_succeeds() -> None:
    sh("exit 0").inject(body=b"y" * (1 << 20), **ARGS)  # the broken pipe is not a failure


def test_missing_executable_is_inject_failed(tmp_path: Path) -> None:
    with pytest.raises(InjectError) as info:
        CommandInjector([str(tmp_path / "no-such-tool")]).inject(body=b"x", **ARGS)
    assert info.value.reason == "INJECT_FAILED"
    assert "no-such-tool" in str(info.value)


def test_killed_by_signal_is_reported() -> None:
    with pytest.raises(InjectError) as info:
        sh("kill -9 $$").inject(body=b"x", **ARGS)
    assert info.value.reason == "INJECT_FAILED"
    assert "signal 9" in str(info.value)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a zombie waiting for its reaper is dead


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """A hung injector must not leak: the command and what it started die, INJECT_TIMEOUT."""
    pidfile = tmp_path / "pid"
    script = f"sleep 60 & echo $! > {pidfile}; echo started >&2; wait"
    with pytest.raises(InjectError) as info:
        sh(script, timeout_s=1.0).inject(body=b"x", **ARGS)
    err = info.value
    assert (err.reason, err.retriable) == ("INJECT_TIMEOUT", False)
    assert err.context["stderr"] == "started"
    grandchild = int(pidfile.read_text())
    for _ in range(100):  # SIGKILL delivery is asynchronous; bounded wait, not a timing assertion
        if _gone(grandchild):
            break
        time.sleep(0.05)
    assert _gone(grandchild), f"grandchild {grandchild} survived the timeout"


def test_a_command_that_never_reads_a_large_body_times_out_not_hangs() -> None:
    """The body is written while the timeout runs: a hung command that never reads a body larger
    than the pipe holds is killed at the timeout (INJECT_TIMEOUT), the write does not block."""
    with pytest.raises(InjectError) as info:
        sh("echo waiting >&2; sleep 60", timeout_s=1.0).inject(body=b"z" * (1 << 20), **ARGS)
    assert (info.value.reason, info.value.context["stderr"]) == ("INJECT_TIMEOUT", "waiting")


def test_python_module_as_injector(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = f"import os,sys; open({str(out)!r},'wb').write(os.environ['FLEET_KIND'].encode()+sys.stdin.buffer.read())"
    CommandInjector([sys.executable, "-c", code]).inject(body=b":body", **ARGS)
    assert out.read_bytes() == b"SEND:body"
