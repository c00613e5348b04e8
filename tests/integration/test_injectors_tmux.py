"""TmuxInjector against a real tmux server: R-ACK-6: the inject is status-gated.

Each test starts its own tmux server on a unique socket (``-L``) and kills it in teardown.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from pipeline.errors import InjectError
from pipeline.gateway.injectors import TmuxInjector
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
        return TmuxInjector(self.pane, socket=self.socket, **kw)  # type: ignore[arg-type]

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        # Bounded polling for an asynchronous terminal; the assertion is on content, not time.
        try:
            wait_until(ready, timeout_s=10, what=what, interval_s=0.05)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; screen: {self.lines()}") from None

    def wait_line(self, line: str) -> None:
        self.wait(repr(line), lambda: line in self.lines())


@pytest.fixture
def tmux() -> Iterator[Tmux]:
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
    server = Tmux(socket)
    path = server.run("display", "-p", "#{socket_path}").strip()
    try:
        server.wait("the bash prompt", lambda: server.command() == "bash" and "$" in server.lines())
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
    tmux.wait("the shell back", lambda: tmux.command() == "bash")
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
