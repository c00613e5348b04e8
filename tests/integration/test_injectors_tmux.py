"""TmuxInjector against a real tmux server: R-ACK-6: the inject is status-gated.

Each test starts its own tmux server on a unique socket (``-L``) and kills it in teardown, and
runs twice: the injector's tmux calls over one control-mode client, and one process per call.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.errors import InjectError
from pipeline.gateway.injectors import InjectUncertainError, TmuxInjector
from pipeline.support.waiting import wait_until
from pipeline.testing import unique_name

pytestmark = [
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]
ARGS = {"gid": "B-w1", "msg_id": "m-1", "kind": "SEND", "sender": "A-main"}
SHELL = "env PS1='$ ' bash --norc --noprofile"  # readline: no 4 KiB canonical-mode line cap


@dataclass
class Tmux:
    socket: str
    pane: str = "t:0.0"
    control: bool = True

    def run(self, *args: str) -> str:
        proc = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return proc.stdout

    def lines(self) -> list[str]:
        return [
            line.rstrip()
            for line in self.run("capture-pane", "-p", "-J", "-t", self.pane).splitlines()
        ]

    def command(self) -> str:
        return self.run("display", "-p", "-t", self.pane, "#{pane_current_command}").strip()

    def injector(self, **kw: object) -> TmuxInjector:
        kw.setdefault("control", self.control)
        return TmuxInjector(self.pane, socket=self.socket, **kw)  # type: ignore[arg-type]

    def control_clients(self) -> int:
        return self.run("list-clients", "-F", "#{client_control_mode}").split().count("1")

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        # Bounded polling for an asynchronous terminal; the assertion is on content, not time.
        try:
            wait_until(ready, timeout_s=10, what=what, interval_s=0.05)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; screen: {self.lines()}") from None

    def wait_line(self, line: str) -> None:
        self.wait(repr(line), lambda: line in self.lines())

    def wait_shell(self) -> None:
        """The shell holds the terminal again, its prompt on screen.

        A forked command's output can be on screen before the shell has reaped it: until then the
        foreground group's leader has no ``/proc`` cmdline, and tmux names the pane by the command
        it was started with (``env``), which the injector rightly calls busy.
        """
        self.wait("the shell back", lambda: self.command() == "bash" and "$" in self.lines())


@pytest.fixture(params=[True, False], ids=["control", "process"])
def tmux(request: pytest.FixtureRequest) -> Iterator[Tmux]:
    socket = unique_name("fleet-test").replace(".", "-")
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    subprocess.run(
        [
            "tmux",
            "-L",
            socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "160",
            "-y",
            "40",
            SHELL,
        ],
        check=True,
        env=env,
        timeout=10,
    )
    server = Tmux(socket, control=request.param)
    path = server.run("display", "-p", "#{socket_path}").strip()
    try:
        server.wait_shell()
        yield server
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False, capture_output=True)
        if path:  # tmux leaves the socket file behind
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def test_text_arrives_in_an_idle_shell(tmux: Tmux) -> None:
    token = unique_name("hello")
    tmux.injector().inject(body=f"echo {token}\n".encode(), **ARGS)
    tmux.wait_line(token)
    assert f"$ echo {token}" in tmux.lines()  # typed once, then Enter


def test_body_is_literal_never_key_names_or_tmux_syntax(tmux: Tmux) -> None:
    injector = tmux.injector()
    injector.inject(body=b"echo C-c Enter Escape -l -- 'a;b' end;", **ARGS)
    tmux.wait_line("C-c Enter Escape -l -- a;b end")
    injector.inject(body=b"echo tail \\;", **ARGS)  # ends in backslash-semicolon
    tmux.wait_line("tail ;")
    injector.inject(body=b"echo '#{pane_id} $HOME' ; echo after", **ARGS)
    tmux.wait_line("after")
    assert "#{pane_id} $HOME" in tmux.lines()


def test_multi_line_and_large_bodies(tmux: Tmux) -> None:
    injector = tmux.injector()
    injector.inject(body="echo one\necho twö\n".encode(), **ARGS)
    tmux.wait_line("twö")
    assert "one" in tmux.lines()
    injector.inject(body=f"printf %s {'a' * 7000} | wc -c".encode(), **ARGS)  # several chunks
    tmux.wait_line("7000")
    tmux.wait_shell()  # wc has exited: the next inject probes an idle shell
    prompts = tmux.lines().count("$")
    injector.inject(body=b"\n", **ARGS)  # an empty brief is a bare Enter: one more prompt
    tmux.wait("a new prompt", lambda: tmux.lines().count("$") == prompts + 1)


def test_busy_pane_gets_nothing_and_a_retriable_target_busy(tmux: Tmux) -> None:
    """R-ACK-6: the inject is status-gated; a busy worker is never typed into."""
    tmux.run("send-keys", "-t", tmux.pane, "sleep 30", "Enter")
    tmux.wait("sleep in the foreground", lambda: tmux.command() == "sleep")
    token = unique_name("never")
    with pytest.raises(InjectError) as info:
        tmux.injector().inject(body=f"echo {token}".encode(), **ARGS)
    err = info.value
    assert (err.reason, err.retriable) == ("TARGET_BUSY", True)
    assert "sleep" in err.context["why"]
    tmux.run("send-keys", "-t", tmux.pane, "C-c")
    tmux.wait_shell()
    assert not any(token in line for line in tmux.lines())  # the busy attempt typed nothing
    tmux.injector().inject(body=f"echo {token}".encode(), **ARGS)  # the retry lands
    tmux.wait_line(token)


def test_idle_pattern_gates_a_program_that_is_not_a_shell(tmux: Tmux) -> None:
    tmux.run("send-keys", "-t", tmux.pane, "cat", "Enter")
    tmux.wait("cat in the foreground", lambda: tmux.command() == "cat")
    assert tmux.injector().status().idle is False  # not a shell: busy without a pattern
    gated = tmux.injector(idle_pattern=r"^\$ cat$|^got-it$")
    status = gated.status()
    assert status.idle and status.last_line == "$ cat"
    gated.inject(body=b"got-it", **ARGS)
    tmux.wait("cat to echo the line", lambda: tmux.lines().count("got-it") == 2)  # tty + cat
    strict = tmux.injector(idle_pattern=r"^> $")
    with pytest.raises(InjectError) as info:
        strict.inject(body=b"nope", **ARGS)
    assert info.value.reason == "TARGET_BUSY"
    assert "does not match" in info.value.context["why"]


def test_copy_mode_is_busy(tmux: Tmux) -> None:
    tmux.run("copy-mode", "-t", tmux.pane)
    with pytest.raises(InjectError) as info:
        tmux.injector().inject(body=b"echo x", **ARGS)
    assert (info.value.reason, info.value.retriable) == ("TARGET_BUSY", True)
    assert "copy mode" in info.value.context["why"]


def test_status_resolves_a_target_to_its_pane_id(tmux: Tmux) -> None:
    pane_id = tmux.run("display", "-p", "-t", tmux.pane, "#{pane_id}").strip()
    status = TmuxInjector("t", socket=tmux.socket).status()
    assert (status.pane_id, status.command, status.idle) == (pane_id, "bash", True)


@pytest.mark.parametrize("pane", ["%999", "t:0.7", "nosession"])
def test_missing_pane_is_inject_failed(tmux: Tmux, pane: str) -> None:
    """tmux's display falls back to another pane for a bad target; the probe must not."""
    with pytest.raises(InjectError) as info:
        TmuxInjector(pane, socket=tmux.socket).inject(body=b"echo x", **ARGS)
    assert (info.value.reason, info.value.retriable) == ("INJECT_FAILED", False)
    assert "can't find" in str(info.value)
    assert "echo x" not in "".join(tmux.lines())


def test_no_server_is_inject_failed() -> None:
    with pytest.raises(InjectError) as info:
        TmuxInjector("t:0", socket=unique_name("absent").replace(".", "-")).inject(
            body=b"x", **ARGS
        )
    assert (info.value.reason, info.value.retriable) == ("INJECT_FAILED", False)


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"echo \x1b[2J", "U+001B"),
        (b"echo a\rb", "U+000D"),
        (b"echo \x7f", "U+007F"),
        ("echo \u0085".encode(), "U+0085"),
        (b"echo \xff\xfe", "not UTF-8"),
        (b"x" * (256 * 1024 + 1), "at most"),
    ],
)
def test_control_characters_and_non_text_are_refused(tmux: Tmux, body: bytes, detail: str) -> None:
    before = tmux.lines()
    with pytest.raises(InjectError) as info:
        tmux.injector().inject(body=body, **ARGS)
    assert (info.value.reason, info.value.retriable) == ("INJECT_BODY_INVALID", False)
    assert detail in str(info.value)
    assert tmux.lines() == before  # refused before anything was typed


def test_one_control_client_carries_every_call_and_a_dead_one_is_replaced(tmux: Tmux) -> None:
    """No tmux process per chunk: the probe and the typing go over one control client; when it
    dies between injects, the next inject attaches a new one and still lands."""
    if not tmux.control:
        pytest.skip("control mode only")
    injector = tmux.injector()
    for i in range(3):
        injector.inject(body=f"echo round-{i} {'x' * 5000} | wc -c".encode(), **ARGS)
        tmux.wait_line("5009")
        tmux.run("send-keys", "-t", tmux.pane, "clear", "Enter")
        tmux.wait("a cleared screen", lambda: "5009" not in tmux.lines())
        tmux.wait_shell()  # clear has exited and been reaped
    assert injector.attaches == 1 and tmux.control_clients() == 1
    assert injector._client is not None
    injector._client.proc.kill()
    injector._client.proc.wait()
    injector.inject(body=b"echo after-reattach", **ARGS)
    tmux.wait_line("after-reattach")
    assert injector.attaches == 2
    injector.close()
    tmux.wait("the client detached", lambda: tmux.control_clients() == 0)


def test_without_a_server_calls_run_as_processes_until_one_can_attach(tmux: Tmux) -> None:
    """Control mode is a cost saving, never a new failure: no attach means the process way."""
    if not tmux.control:
        pytest.skip("control mode only")
    injector = TmuxInjector("t:0.0", socket=tmux.socket + "-x")  # nothing listens there
    with pytest.raises(InjectError) as info:
        injector.inject(body=b"x", **ARGS)
    assert info.value.reason == "INJECT_FAILED" and injector.attaches == 0


FAKE_TMUX = r"""
import sys
log = open(sys.argv[1], "a")
args = sys.argv[2:]
if "-C" not in args:  # a process call: record it, say nothing
    log.write("process " + " ".join(args) + "\n")
    sys.exit(0)
n = 0
def block(*lines):
    global n
    n += 1
    print(f"%begin 1 {n} 1", *lines, f"%end 1 {n} 1", sep="\n", flush=True)
block()
for line in sys.stdin:
    log.write("control " + line)
    log.flush()
    if line.startswith('"capture-pane"'):
        block("$ ")
        block("%7\tbash\t0\t0\t0")
    else:
        sys.exit(1)  # took the keys, died before answering
"""


def test_a_client_lost_while_typing_leaves_the_keys_uncertain_never_retyped(
    tmp_path: Path,
) -> None:
    """R-ACK-6, at-most-once: keys handed to a control client that died before answering may
    have been typed: ``InjectUncertainError``, and they are not sent again another way."""
    fake = tmp_path / "tmux.py"
    fake.write_text(FAKE_TMUX)
    log = tmp_path / "calls"
    wrapper = tmp_path / "tmux"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {fake} {log} "$@"\n')
    wrapper.chmod(0o755)
    injector = TmuxInjector("t:0", tmux=str(wrapper))
    with pytest.raises(InjectUncertainError) as info:
        injector.inject(body=b"echo once", **ARGS)
    assert info.value.retriable is False
    calls = log.read_text().splitlines()
    assert [c.split(" ", 1)[0] for c in calls] == ["control", "control"]
    assert sum("echo once" in c for c in calls) == 1
