"""A rolling upgrade from the previous release (R-PRES-7, R-ENV-7, R-ACK-2, R-ACK-3): real broker,
gateways as processes, each host driven by its own release's ``fleet`` CLI.

The previous release (the tag ``PREVIOUS``) is installed into a virtualenv of its own from the
tag (``tests/integration/previous_release.py``: ``git archive``, a wheel of that tree, ``pip
install --no-deps --no-index``; its dependencies are this interpreter's), and its hosts run its
installed ``fleet`` command, with nothing of this checkout on their path.

* Two hosts, old A and new B, exchange every kind of message both ways: REPLY (held), a brief to
  an inject worker (injected, its INJECTED receipt held back), ASK and its ANSWER (injected into
  the asking worker's turn). B is stopped with SIGTERM: the old release reads its *away* records
  as live presence and accepts a send to it meanwhile. Then A is upgraded in place, and the new
  A and B exchange again.
* Three hosts, all on the previous release, are upgraded one gateway at a time while every host
  sends REPLYs and briefs to every other without pause: no send refused, no dead letter, no
  FAILED, every REPLY held once and every brief injected once, in send order per sender and
  recipient.
* Body framing (docs/envelope.md): two hosts of this release, one writing the new ``0xFB 0x02 N``
  framing (``body_framing = "v2"``), exchange everything both ways; a previous-release host
  refuses that framing, which is why this release still writes ``0x00 N`` by default.

A previous-release gateway is stopped as docs/operations.md says for that one step: its SIGTERM
would tombstone (sends to it refused until it is back), so kill -9, at a moment no brief is
mid-inject at it. About a minute for both: ``make test`` runs them, ``make test-upgrade`` alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.chaos.gateway_process import RUNNING_LINE, GatewayProc
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.tables import outbox
from pipeline.store import make_engine
from pipeline.support.processes import fleet_env
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet
from tests.integration.previous_release import NoTag, Release, install

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.upgrade]

PREVIOUS = "v0.12.0"
CAUGHT_UP = "inbox: roster caught up"  # a line the previous release does not log


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
def previous(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The previous release, installed from its tag into a virtualenv of its own."""
    try:
        return install(PREVIOUS, tmp_path_factory.mktemp("previous"))
    except NoTag as e:
        if os.environ.get("FLEET_REQUIRE_PREVIOUS"):  # make test-upgrade: a skip would hide it
            pytest.fail(f"{e} (git fetch --tags)")
        pytest.skip(str(e))


class Host:
    """One host: its config, its gateway process and its CLI, of one release or the other."""

    def __init__(self, name: str, config: Path, log: Path, release: Release | None) -> None:
        self.name, self.config, self.log, self.release = name, config, log, release
        self.proc: subprocess.Popen[bytes] | GatewayProc | None = None
        self.starts = 0

    def argv(self) -> list[str]:
        """The previous release's installed ``fleet``, or this checkout's."""
        if self.release is not None:
            return [str(self.release.fleet)]
        return [sys.executable, "-m", "pipeline"]

    def env(self) -> dict[str, str]:
        return self.release.env() if self.release is not None else fleet_env()

    def cwd(self) -> Path | None:
        """Outside this checkout for the previous release (nothing of it on the path)."""
        return self.release.venv if self.release is not None else None

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.argv(), *args],
            env=self.env(), cwd=self.cwd(), capture_output=True, text=True, check=check,
            timeout=120,
        )  # fmt: skip

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "--config", str(self.config), "--json").stdout)

    def start(self) -> None:
        self.starts += 1
        if self.release is None:
            self.proc = GatewayProc(self.config, self.log).start()
        else:
            with self.log.open("ab") as out:
                self.proc = subprocess.Popen(
                    [*self.argv(), "gateway", "run", "--config", str(self.config)],
                    env=self.env(), cwd=self.cwd(), stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
        wait_until(self.running, timeout_s=120, what=f"{self.name} running")

    def running(self) -> bool:
        return self.log.read_text(errors="replace").count(RUNNING_LINE) >= self.starts

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

    def upgrade(self) -> None:
        """From here on the host runs this checkout: its store upgraded first (this release's is
        revisions ahead, store 0013, and a gateway refuses a store behind), its gateway started
        again by the caller."""
        self.release = None
        self.cli("store", "upgrade", "--config", str(self.config))

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
    kafka: BrokerHandle, tmp_path: Path, previous: Release
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
        [*dst.argv(), "poll", "--config", str(dst.config), "--as", f"main-{d}", "--wait", "60",
         "--json"],
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
    a.upgrade()
    a.start()
    main_a = Inbox(a, "main-a")
    wait_until(lambda: main_a.has("REPLY", body="while A upgrades"), timeout_s=60,
               what="the REPLY sent while A upgraded, held")  # fmt: skip
    assert CAUGHT_UP in a.log.read_text(), "A upgraded"
    _exchange(a, b, injected["B"], "new-to-new")
    _exchange(b, a, injected["A"], "new-to-new-back")


THREE = ("A", "B", "C")
# a brief sent while its recipient's gateway is replaced waits out the replacement: kill, store
# upgrade, a new gateway's start (30 s and more at a load average of 20 on two cores); the
# default 30 s deadline would answer it FAILED there (correctly: docs/presence.md, "Away")
BRIEF_DEADLINE = "inject_deadline_s = 180.0"


class Traffic:
    """Continuous traffic across a fleet: one thread per host, each through its host's current
    ``fleet`` CLI. Every round a host drains its main (REPLYs from the others, its briefs'
    receipts) and sends a REPLY to every other main and a brief to every other worker. A host
    whose gateway is being replaced sends nothing meanwhile (its agents are down with it);
    briefs *to* it are held back only while its old gateway has one in flight (below)."""

    def __init__(self, hosts: dict[str, Host]) -> None:
        self.hosts = hosts
        self.turns = {h: threading.Lock() for h in hosts}  # held for a host's whole round
        self.down: set[str] = set()
        self.no_briefs: set[str] = set()
        self.replies: dict[tuple[str, str], list[str]] = defaultdict(list)  # bodies, send order
        self.briefs: dict[tuple[str, str], list[str]] = defaultdict(list)  # msgIds, send order
        self.refused: list[str] = []
        self.errors: list[str] = []
        self.got: dict[str, list[dict[str, Any]]] = defaultdict(list)  # what each main drained
        self.rounds: Counter[str] = Counter()  # rounds each host completed
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(h,), daemon=True) for h in hosts]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=180)

    def _send(self, src: str, to: str, kind: str, body: str) -> str | None:
        out = self.hosts[src].cli("send", "--config", str(self.hosts[src].config), "--from",
                                  f"main-{src.lower()}", "--to", to, "--kind", kind, body,
                                  "--json", check=False)  # fmt: skip
        if out.returncode != 0:
            self.refused.append(f"{src} -> {to}: {out.stdout.strip()} {out.stderr[-300:]}")
            return None
        return str(json.loads(out.stdout)["msgId"])

    def _round(self, src: str, n: int) -> None:
        self.got[src] += self.hosts[src].poll(f"main-{src.lower()}")
        for dst in (h for h in self.hosts if h != src):
            body = f"{src}>{dst} r{n}"
            if self._send(src, f"main-{dst.lower()}", "REPLY", body) is not None:
                self.replies[(src, dst)].append(body)
            if dst not in self.no_briefs:
                mid = self._send(src, f"worker-{dst.lower()}", "SEND", f"{src}>{dst} b{n}")
                if mid is not None:
                    self.briefs[(src, dst)].append(mid)

    def _run(self, src: str) -> None:
        n = 0
        while not self.stopped.is_set():
            with self.turns[src]:
                if src not in self.down:
                    try:
                        self._round(src, n)
                        self.rounds[src] += 1
                    except (
                        subprocess.SubprocessError,
                        ValueError,
                        KeyError,
                    ) as e:  # the test fails on it
                        self.errors.append(f"{src} round {n}: {e!r}")
                    n += 1
            time.sleep(0.2)

    def _between_rounds(self) -> None:
        """Every round under way has ended: a flag set before this is seen by every next one."""
        for turn in self.turns.values():
            with turn:
                pass

    def hold_briefs_to(self, host: str) -> None:
        self.no_briefs.add(host)
        self._between_rounds()

    def release_briefs_to(self, host: str) -> None:
        self.no_briefs.discard(host)

    def take_down(self, host: str) -> None:
        with self.turns[host]:
            self.down.add(host)

    def bring_up(self, host: str) -> None:
        self.down.discard(host)

    def receipts(self, src: str) -> Counter[tuple[str, str]]:
        """``(msgId the receipt is about, INJECTED | FAILED)`` drained at ``src``'s main."""
        return Counter((m["about"], m["kind"]) for m in self.got[src]
                       if m["kind"] in ("INJECTED", "FAILED"))  # fmt: skip

    def briefs_ended(self, to: str) -> bool:
        """Every brief sent so far to ``to``'s worker has its INJECTED receipt back."""
        return all(
            self.receipts(src)[(mid, "INJECTED")] >= 1
            for (src, dst), mids in list(self.briefs.items()) if dst == to
            for mid in mids
        )  # fmt: skip

    def held_from(self, src: str) -> int:
        """REPLYs from ``src``'s main drained at the other hosts so far."""
        frm = f"main-{src.lower()}"
        return sum(m["kind"] == "REPLY" and m["from"] == frm
                   for h, got in list(self.got.items()) if h != src for m in got)  # fmt: skip

    def drained(self, host: str) -> int:
        return len(self.got[host])


def _store_dead_letters(url: str, prefix: str) -> int:
    """Dead letters a gateway staged in its outbox (for the DLQ topic)."""
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as c:
            dlq = TopicNames(prefix=prefix).dlq
            return len(list(c.execute(select(outbox.c.id).where(outbox.c.topic == dlq))))
    finally:
        engine.dispose()


def _upgrade(host: Host, traffic: Traffic) -> None:
    """One step of the rolling upgrade, as docs/operations.md says for a v0.12.0 gateway: its
    SIGTERM would tombstone (refusals at every peer), so it is stopped with kill -9, at a moment
    it has no brief mid-inject (a kill -9 there is reported ``uncertain``, or before the inject
    journal's row, answered FAILED). Briefs to it resume at once, while it is down: they wait in
    its inbox topic and the new gateway injects them within their deadline."""
    name = host.name
    traffic.hold_briefs_to(name)
    wait_until(lambda: traffic.briefs_ended(name), timeout_s=120,
               what=f"the briefs to worker-{name.lower()} injected")  # fmt: skip
    traffic.take_down(name)
    host.kill9()
    traffic.release_briefs_to(name)
    host.upgrade()
    host.start()
    wait_until(lambda: CAUGHT_UP in host.log.read_text(), timeout_s=120,
               what=f"{name} runs this checkout (its roster caught up)")  # fmt: skip
    inbox, shipped = traffic.drained(name), traffic.held_from(name)
    traffic.bring_up(name)
    wait_until(lambda: traffic.drained(name) > inbox and traffic.held_from(name) > shipped,
               timeout_s=120, what=f"{name} upgraded: draining its inbox, its sends held")  # fmt: skip
    rounds = dict(traffic.rounds)  # the fleet, mixed as it now is, talks a while in every direction
    wait_until(lambda: all(traffic.rounds[h] >= rounds[h] + 2 for h in rounds), timeout_s=120,
               what="two more rounds from every host")  # fmt: skip


def test_a_three_host_fleet_upgrades_one_gateway_at_a_time_under_traffic(
    kafka: BrokerHandle, tmp_path: Path, previous: Release
) -> None:
    """R-PRES-7, R-ACK-2, R-ACK-3: three hosts on the previous release, each upgraded in turn
    while every host sends REPLYs and briefs to every other: no send refused, no dead letter, no
    FAILED; every REPLY held once and every brief injected once, in send order per sender and
    recipient."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, THREE)
    injected = {h: tmp_path / f"injected-{h}.txt" for h in THREE}
    hosts = {}
    for h in THREE:
        injected[h].touch()
        config = fleet.config_file(h, _entities(h, injected[h]), extra=BRIEF_DEADLINE)
        hosts[h] = Host(h, config, tmp_path / f"{h}.log", previous)
    traffic = Traffic(hosts)
    try:
        for host in hosts.values():
            host.start()
        everyone = {f"{r}-{h.lower()}" for h in THREE for r in ("main", "worker")}
        for host in hosts.values():
            wait_until(lambda host=host: everyone <= host.live(), timeout_s=120,
                       what=f"every entity live at {host.name}")  # fmt: skip
        assert all(CAUGHT_UP not in h.log.read_text() for h in hosts.values()), "all previous"
        traffic.start()
        wait_until(lambda: all(traffic.held_from(h) > 0 for h in THREE), timeout_s=120,
                   what="traffic flowing between all three")  # fmt: skip
        for host in hosts.values():
            _upgrade(host, traffic)
        traffic.finish()
        assert traffic.errors == []
        sent = [*map(len, traffic.replies.values()), *map(len, traffic.briefs.values())]
        assert len(sent) == 12 and min(sent) >= 8, "traffic all along, every pair both kinds"
        assert traffic.refused == [], "no send refused during the rolling upgrade"

        def everything_arrived() -> bool:
            for h, host in hosts.items():
                traffic.got[h] += host.poll(f"main-{h.lower()}")
            replies = sum(m["kind"] == "REPLY" for got in traffic.got.values() for m in got)
            return replies >= sum(map(len, traffic.replies.values())) and all(
                traffic.briefs_ended(h) for h in THREE
            )

        wait_until(everything_arrived, timeout_s=120, what="every REPLY held, every brief ended")
        time.sleep(2)  # nothing more comes: a duplicate would show now
        for h, host in hosts.items():
            traffic.got[h] += host.poll(f"main-{h.lower()}")
        for (src, dst), bodies in traffic.replies.items():
            held = [m["body"] for m in traffic.got[dst]
                    if m["kind"] == "REPLY" and m["from"] == f"main-{src.lower()}"]  # fmt: skip
            assert held == bodies, f"{src} -> {dst}: every REPLY held once, in send order"
        failed = [m for got in traffic.got.values() for m in got if m["kind"] == "FAILED"]
        assert failed == [], "no FAILED"
        for (src, dst), mids in traffic.briefs.items():
            frm = ["SEND", f"main-{src.lower()}"]
            order = [ln[2] for ln in _lines(injected[dst]) if ln[:2] == frm]
            assert order == mids, f"{src} -> {dst}: every brief injected once, in send order"
            receipts = traffic.receipts(src)
            assert all(receipts[(mid, "INJECTED")] == 1 for mid in mids), f"{src} -> {dst}"
        stages = [m.get("stage") for got in traffic.got.values() for m in got
                  if m["kind"] == "INJECTED"]  # fmt: skip
        assert "uncertain" not in stages
        assert all(_store_dead_letters(fleet.rig.store_url(h), fleet.prefix) == 0 for h in THREE)
        listed = hosts["A"].cli("dlq", "ls", "--bootstrap", fleet.bootstrap, "--prefix",
                                fleet.prefix, "--json")  # fmt: skip
        assert json.loads(listed.stdout) == [], "the DLQ topic holds nothing"
    finally:
        traffic.stopped.set()
        for host in hosts.values():
            host.stop()


# -- body framing (docs/envelope.md "Body framing") -----------------------------------------------

V2 = 'body_framing = "v2"'


def _roster_bodies(kafka: BrokerHandle, prefix: str, gids: set[str]) -> dict[str, set[int]]:
    """The first byte of every presence body on the roster for ``gids``, read to its end."""
    from confluent_kafka import Consumer, TopicPartition

    from pipeline.kafka.settings import consumer_config

    topic = TopicNames(prefix=prefix).roster
    consumer = Consumer(consumer_config(kafka.bootstrap, group_id=f"{prefix}framing"))
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in meta}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, 0) for p in meta])
        seen: dict[str, set[int]] = defaultdict(set)
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 60
        while len(done) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            gid = (msg.key() or b"").decode()
            if gid in gids and msg.value():
                seen[gid].add(msg.value()[0])
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return seen
    finally:
        consumer.close()


def test_a_v2_framing_host_and_a_v1_host_exchange_everything_both_ways(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """The next release's rolling upgrade, flipping ``body_framing``: this release reads both
    framings, so a v1 host (the default) and a v2 host exchange every kind both ways (R-ENV-8);
    each writes its own framing on the wire."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    injected = {h: tmp_path / f"injected-{h}.txt" for h in ("A", "B")}
    for path in injected.values():
        path.touch()
    a = Host("A", fleet.config_file("A", _entities("A", injected["A"])), tmp_path / "A.log", None)
    b = Host("B", fleet.config_file("B", _entities("B", injected["B"]), extra=V2),
             tmp_path / "B.log", None)  # fmt: skip
    try:
        a.start()
        b.start()
        wait_until(lambda: {"main-b", "worker-b"} <= a.live(), timeout_s=120, what="B live at A")
        wait_until(lambda: {"main-a", "worker-a"} <= b.live(), timeout_s=120, what="A live at B")
        _exchange(a, b, injected["B"], "v1-to-v2")  # B's INJECTED (v2) read by A
        _exchange(b, a, injected["A"], "v2-to-v1")  # A's INJECTED (v1) read by B
    finally:
        a.stop()
        b.stop()
    firsts = _roster_bodies(kafka, fleet.prefix, {"main-a", "worker-a", "main-b", "worker-b"})
    assert firsts == {"main-a": {0x00}, "worker-a": {0x00}, "main-b": {0xFB}, "worker-b": {0xFB}}
    for host in (a, b):
        assert "SCHEMA_INVALID" not in host.log.read_text(errors="replace")
        assert _store_dead_letters(fleet.rig.store_url(host.name), fleet.prefix) == 0


def test_the_previous_release_refuses_v2_bodies_so_this_one_writes_v1_by_default(
    kafka: BrokerHandle, tmp_path: Path, previous: Release
) -> None:
    """Why ``body_framing`` is "v1" by default in this release: a v0.12.0 reader refuses any
    first byte but 0x00 (``SCHEMA_INVALID``), so a v2 host's presence is never live at an old
    one; the new host still reads the old one's v1 records."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    injected = {h: tmp_path / f"injected-{h}.txt" for h in ("A", "B")}
    for path in injected.values():
        path.touch()
    a = Host("A", fleet.config_file("A", _entities("A", injected["A"])), tmp_path / "A.log",
             previous)  # fmt: skip
    b = Host("B", fleet.config_file("B", _entities("B", injected["B"]), extra=V2),
             tmp_path / "B.log", None)  # fmt: skip
    try:
        a.start()
        b.start()
        wait_until(lambda: {"main-a", "worker-a"} <= b.live(), timeout_s=120, what="A live at B")
        refused = "[SCHEMA_INVALID] presence: missing or bad schema prefix"
        wait_until(lambda: refused in a.log.read_text(errors="replace"), timeout_s=120,
                   what="the old A refusing B's v2 presence")  # fmt: skip
        assert not {"main-b", "worker-b"} & a.live()
    finally:
        a.stop()
        b.stop()
