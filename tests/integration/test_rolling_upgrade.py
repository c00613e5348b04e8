"""A rolling upgrade from the previous release (R-PRES-7, R-ENV-7, R-ACK-2, R-ACK-3): real broker,
gateways as processes, each host driven by its own release's ``fleet`` CLI.

The previous release (the tag ``PREVIOUS``) is unpacked from the repository with ``git archive``
and run from there (this interpreter and its dependencies, that release's ``pipeline`` first on
the path). Host A runs it, host B the new code; they exchange every kind of message both ways:
REPLY (held), a brief to an inject worker (injected, its INJECTED receipt held back), ASK and its
ANSWER (injected into the asking worker's turn). B is stopped with SIGTERM: the old release reads
its *away* records as live presence and accepts a send to it meanwhile. Then A is upgraded in
place (the old release's SIGTERM would tombstone, so it is stopped as docs/operations.md says for
that one step: kill -9), and the new A and B exchange again; nothing is refused.

About a minute: ``make test`` runs it, ``make test-upgrade`` runs it alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.chaos.gateway_process import RUNNING_LINE, GatewayProc
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.upgrade]

PREVIOUS = "v0.12.0"
CAUGHT_UP = "inbox: roster caught up"  # a line the previous release does not log
REPO = Path(__file__).resolve().parents[2]


def _entities(host: str, injected: Path) -> str:
    h = host.lower()
    return (
        f'[[entities]]\ngid = "main-{h}"\nrole = "main"\ndelivery = "pull"\n'
        f'[[entities]]\ngid = "worker-{h}"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", "echo $FLEET_KIND $FLEET_FROM $FLEET_MSG_ID >> {injected}"]\n'
        "timeout_s = 5.0\n"
    )


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's source tree, unpacked from its tag."""
    root = tmp_path_factory.mktemp("previous")
    archive = root / "release.tar"
    with archive.open("wb") as out:
        done = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS], stdout=out,
                              stderr=subprocess.PIPE, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"no tag {PREVIOUS} here: {done.stderr.decode()[-200:]}")
    with tarfile.open(archive) as tar:
        tar.extractall(root / "src", filter="data")
    return root / "src"


class Host:
    """One host: its config, its gateway process and its CLI, of one release or the other."""

    def __init__(self, name: str, config: Path, log: Path, release: Path | None) -> None:
        self.name, self.config, self.log, self.release = name, config, log, release
        self.proc: subprocess.Popen[bytes] | GatewayProc | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.release is not None:  # the old release first, nothing of this checkout
            env["PYTHONPATH"] = str(self.release)
        else:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        return env

    def cwd(self) -> Path | None:
        """``python -m`` puts the working directory first on the path: this checkout's, unless
        the process runs in the release's own tree."""
        return self.release

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipeline", *args],
            env=self.env(), cwd=self.cwd(), capture_output=True, text=True, check=check,
            timeout=120,
        )  # fmt: skip

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--config", str(self.config), "--json").stdout)

    def start(self) -> None:
        if self.release is None:
            self.proc = GatewayProc(self.config, self.log).start()
        else:
            with self.log.open("ab") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "pipeline", "gateway", "run", "--config",
                     str(self.config)],
                    env=self.env(), cwd=self.cwd(), stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
        wait_until(self.running, timeout_s=120, what=f"{self.name} running")

    def running(self) -> bool:
        starts = self.proc.starts if isinstance(self.proc, GatewayProc) else 1
        return self.log.read_text(errors="replace").count(RUNNING_LINE) >= starts + self.earlier

    earlier = 0  # running lines an earlier release wrote to the same log

    def stop(self) -> int | None:
        if isinstance(self.proc, GatewayProc):
            return self.proc.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            return self.proc.wait(30)
        return None

    def kill9(self) -> None:
        if isinstance(self.proc, GatewayProc):
            self.proc.kill9()
        elif self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def send(self, frm: str, to: str, body: str, kind: str = "SEND") -> str:
        out = self.json("send", "--from", frm, "--to", to, "--kind", kind, body)
        return str(out["msgId"])

    def poll(self, gid: str) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = self.json("poll", "--as", gid, "--limit", "1000")
        return got

    def live(self) -> set[str]:
        return {e["gid"] for e in self.json("roster")["entries"] if e.get("live", True)}


@pytest.fixture
def hosts(
    kafka: BrokerHandle, tmp_path: Path, previous: Path
) -> Iterator[tuple[Host, Host, dict[str, Path]]]:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    injected = {h: tmp_path / f"injected-{h}.txt" for h in ("A", "B")}
    for path in injected.values():
        path.touch()
    cfg = {h: fleet.config_file(h, _entities(h, injected[h])) for h in ("A", "B")}
    a = Host("A", cfg["A"], tmp_path / "A.log", previous)
    b = Host("B", cfg["B"], tmp_path / "B.log", None)
    try:
        yield a, b, injected
    finally:
        a.stop()
        b.stop()


class Inbox:
    """What one pull entity got so far (drained through its host's CLI)."""

    def __init__(self, host: Host, gid: str) -> None:
        self.host, self.gid, self.got = host, gid, []  # type: list[dict[str, Any]]

    def has(self, kind: str, **match: str) -> bool:
        self.got += self.host.poll(self.gid)
        return any(m["kind"] == kind and all(m.get(k) == v for k, v in match.items())
                   for m in self.got)  # fmt: skip


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()]


def _exchange(src: Host, dst: Host, injected: Path, tag: str) -> None:
    """From ``src`` to ``dst``: a REPLY held, a brief injected (INJECTED back), an ASK answered
    (the ANSWER injected into the asking worker)."""
    s, d = src.name.lower(), dst.name.lower()
    main_src, main_dst = Inbox(src, f"main-{s}"), Inbox(dst, f"main-{d}")
    src.send(f"main-{s}", f"main-{d}", f"reply {tag}", kind="REPLY")
    wait_until(lambda: main_dst.has("REPLY", body=f"reply {tag}"), timeout_s=60,
               what=f"{tag}: REPLY held at {dst.name}")  # fmt: skip
    brief = src.send(f"main-{s}", f"worker-{d}", f"brief {tag}")
    wait_until(lambda: main_src.has("INJECTED", about=brief), timeout_s=60,
               what=f"{tag}: INJECTED back at {src.name}")  # fmt: skip
    assert [ln for ln in _lines(injected) if ln[-1] == brief] == [["SEND", f"main-{s}", brief]]
    src_injected = injected.parent / f"injected-{src.name}.txt"

    def answers() -> int:
        return sum(ln[:2] == ["ANSWER", f"main-{d}"] for ln in _lines(src_injected))

    before = answers()
    dst.poll(f"main-{d}")  # drained: the open pull below returns with the ASK, nothing older
    # an ASK reaches a main only while it pulls (else NO_WAITER): an open pull, then the ASK
    waiting = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "poll", "--config", str(dst.config),
         "--as", f"main-{d}", "--wait", "60", "--json"],
        env=dst.env(), cwd=dst.cwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(3)  # the pull is open at the gateway
    asked = src.json("ask", "--from", f"worker-{s}", "--to", f"main-{d}", f"ask {tag}",
                     "--ttl", "90")  # fmt: skip
    turn = str(asked["turnId"])
    out, err = waiting.communicate(timeout=120)
    held = json.loads(out) if out.strip() else []
    assert [m["kind"] for m in held if m.get("turnId") == turn] == ["ASK"], (held, err[-500:])
    dst.json("answer", "--from", f"main-{d}", "--to", f"worker-{s}", "--turn", turn, f"ans {tag}")
    wait_until(
        lambda: answers() == before + 1,
        timeout_s=60,
        what=f"{tag}: ANSWER injected into worker-{s}",
    )


def test_an_old_and_a_new_gateway_exchange_everything_and_upgrade_without_a_refusal(
    hosts: tuple[Host, Host, dict[str, Path]],
) -> None:
    a, b, injected = hosts
    a.start()
    b.start()
    wait_until(lambda: {"main-b", "worker-b"} <= a.live(), timeout_s=120, what="B live at old A")
    wait_until(lambda: {"main-a", "worker-a"} <= b.live(), timeout_s=120, what="A live at new B")

    _exchange(a, b, injected["B"], "old-to-new")
    _exchange(b, a, injected["A"], "new-to-old")

    assert CAUGHT_UP not in a.log.read_text(), "A runs the previous release"
    assert CAUGHT_UP in b.log.read_text(), "B runs this checkout"

    # the new B stops (away); the old A reads its away records as live presence
    assert b.stop() == 0
    time.sleep(2)
    assert {"main-b", "worker-b"} <= a.live(), "old release: the away B is still live"
    a.send("main-a", "main-b", "while B is away", kind="REPLY")
    b.start()
    main_b = Inbox(b, "main-b")
    wait_until(lambda: main_b.has("REPLY", body="while B is away"), timeout_s=60,
               what="the REPLY sent while B was away, held")  # fmt: skip

    # upgrade A in place: the old release's stop would tombstone, so kill -9 (docs/operations.md)
    a.kill9()
    b.send("main-b", "main-a", "while A upgrades", kind="REPLY")  # accepted: A's binding stays
    a.earlier = 1
    a.release = None
    # this release's store is revisions ahead (store 0013): upgrade it before the new gateway
    a.cli("store", "upgrade", "--config", str(a.config))
    a.start()
    main_a = Inbox(a, "main-a")
    wait_until(lambda: main_a.has("REPLY", body="while A upgrades"), timeout_s=60,
               what="the REPLY sent while A upgraded, held")  # fmt: skip
    assert CAUGHT_UP in a.log.read_text(), "A upgraded"
    _exchange(a, b, injected["B"], "new-to-new")
    _exchange(b, a, injected["A"], "new-to-new-back")
