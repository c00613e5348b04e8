"""The workload driver: two hosts as gateway processes and a steady mix of operations.

Host A runs ``main-a`` (pull) and ``worker-a`` (pull); host B runs ``main-b`` (pull) and
``worker-b`` (inject, through a command that appends ``$FLEET_MSG_ID`` to a file). The driver
uses the production client on each host's store (:func:`~pipeline.bootstrap.client.build_client`,
what ``fleet send|ask|answer|broadcast`` build) and the run journal
(:class:`~pipeline.runs.RunJournal`) and, at ``rate_per_s`` for ``duration_s``, cycles through:

* REPLY ``main-a -> main-b`` (the reply/pull path, seed 000 §6);
* SEND briefs ``main-a -> worker-b`` (the forward/inject path, §5);
* ASK ``worker-a -> main-b``, answered by a responder that keeps an open pull for ``main-b`` on
  B's store and sends each ASK's ANSWER ``main-b -> worker-a`` (seed 000 §7.4);
* BROADCAST ``main-a -> crew`` (``worker-a`` on A, ``main-b`` on B; seed 000 §8);
* run steps in B's store (two runs, a step each, a completion at the end; seed 003): each step's
  state and its outbox row in one transaction, shipped by B's gateway relay;
* and, every :data:`BAD_EVERY` operations, a **bad record** written straight to B's inbox (what
  a buggy client or an attacker on the wire would put there): garbage, a REPLY whose body was
  changed after A signed it, or one signed by a key nobody trusts. B must dead-letter each with
  a reason, never hold it, and neither die nor hot-loop on it (seed 000 §9, issue 12).

Each locally acknowledged operation is a history row. After heal-and-drain,
:meth:`Workload.collect` appends what the stores, the file and the run topic (through the fold)
say happened.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.bootstrap.client import build_client
from pipeline.envelope import Envelope, Kind, Signer, encode
from pipeline.envelope.model import new_id
from pipeline.errors import FleetError
from pipeline.gateway.client import GatewayClient
from pipeline.host.config import load_config
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.runs import RunJournal
from pipeline.store import make_engine
from pipeline.testing import unique_name

from . import checker, collect
from .history import DeliveryPath, HistoryWriter, Op, read_history
from .procs import GatewayProc

log = logging.getLogger(__name__)

HOSTS = ("A", "B")
SENDER, MAIN_B, WORKER_B = "main-a", "main-b", "worker-b"
ASKER = "worker-a"  # a worker on A that asks main-b (seed 000 §7.4: a worker asks a main)
GROUP = "crew"  # the broadcast group: worker-a on A, main-b on B (both pull)
MEMBERS = {"A": [ASKER], "B": [MAIN_B]}
TENANT, RUNS = "chaos", ("r0", "r1")
RUN_POOL = "runs"  # the run topic is created as <prefix>pool.runs (ensure_pool_topic)
# one cycle of the mix: REPLY and SEND briefs stay the bulk (the planted bugs bite on them)
MIX = ("reply", "brief", "ask", "reply", "brief", "broadcast", "reply", "brief", "run", "run")
Stream = tuple[str, str]
BAD_EVERY = 20  # one bad record per this many operations of the mix (every 2 s at 10/s)
BAD_VARIANTS = ("garbage", "forged", "stranger")


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    bootstrap: str
    root: Path
    rate_per_s: float = 10.0
    duration_s: float = 20.0
    inject_deadline_s: float = 30.0  # the default: faults here last less
    # an ASK's turn expires (FAILED EXPIRED to the asker) after this: past a slow restart on a
    # loaded machine (a clean one took 43 s here), inside the drain bound (an ASK whose record
    # was lost to retention ends with its expiry before the drain gives up)
    ask_ttl_s: float = 60.0
    presence_ttl_s: float = 30.0
    ready_timeout_s: float = 90.0
    drain_timeout_s: float = 90.0
    quiet_s: float = 3.0  # a last redelivery window: duplicates would show up now


class Workload:
    def __init__(self, config: WorkloadConfig, history: HistoryWriter) -> None:
        self.config = config
        self.history = history
        self.root = config.root
        self.prefix = unique_name("chaos").replace(".", "") + "."
        self.topics = TopicNames(prefix=self.prefix)
        self.run_topic = self.topics.pool(RUN_POOL)
        self.injected_file = self.root / "injected.txt"
        self.seq: dict[Stream, int] = {}
        self.sent = 0  # REPLYs and briefs acknowledged (the nemesis's progress measure)
        self.ops = 0
        self.refused = 0
        self.timings: dict[str, float] = {}  # seconds per phase of the repetition
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._responder: threading.Thread | None = None
        self._answering = threading.Event()
        self.procs: dict[str, GatewayProc] = {}
        self.client: GatewayClient | None = None
        self.client_b: GatewayClient | None = None
        self._signer_b: Signer | None = None
        self.journal = RunJournal(topic=self.run_topic)
        self.run_steps: dict[str, int] = dict.fromkeys(RUNS, 0)
        self.bad = 0  # bad records written to B's inbox
        self._producer: Any = None  # the raw producer of the bad records (start())
        self._signers: dict[str, Signer] = {}  # A's key, and a stranger's claiming to be A

    # -- setup -------------------------------------------------------------------------------
    def store_url(self, host: str) -> str:
        return f"sqlite:///{self.root / (host + '.sqlite')}"

    def _config(self, host: str, entities: str, extra: str = "") -> Path:
        r, c = self.root, self.config
        path = r / f"{host}.toml"
        path.write_text(
            f'host = "{host}"\nbootstrap = "{c.bootstrap}"\nstore_url = "{self.store_url(host)}"\n'
            f'topic_prefix = "{self.prefix}"\nkey_file = "{r / (host + ".key")}"\n'
            f'trust_dir = "{r / "trusted"}"\npresence_interval_s = 1.0\n'
            f"presence_ttl_s = {c.presence_ttl_s}\nsweep_interval_s = 0.5\n{extra}\n{entities}\n"
        )
        return path

    def _fresh_store(self, host: str) -> None:
        """``host``'s store: an empty copy of a store migrated to head once per run (the
        template beside the repetitions' directories), not a migration per host and
        repetition - seconds each on a loaded machine. The gateway's start-up schema check
        still runs on it (at head: one query). Written through a symlink a rig put there."""
        template = self.root.parent / "store-template.sqlite"
        if not template.exists():
            tmp = self.root.parent / f"store-template.{id(self)}.tmp"
            make_engine(f"sqlite:///{tmp}").dispose()
            tmp.replace(template)
        src, dst = sqlite3.connect(template), sqlite3.connect(self.root / f"{host}.sqlite")
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "trusted").mkdir(exist_ok=True)
        signers = {}
        for h in HOSTS:
            s = Signer.generate(h)
            s.write_private(self.root / f"{h}.key")
            s.write_public(self.root / "trusted" / f"{h}.pub")
            signers[h] = s
        self._signers = {"forged": signers["A"], "stranger": Signer.generate("A")}  # not trusted
        self.injected_file.touch()
        a = self._config(
            "A",
            f'[[entities]]\ngid = "{SENDER}"\nrole = "main"\ndelivery = "pull"\n'
            f'[[entities]]\ngid = "{ASKER}"\nrole = "worker"\ndelivery = "pull"\n'
            f'groups = ["{GROUP}"]\n',
            extra=f"inject_deadline_s = {self.config.inject_deadline_s}",
        )
        b = self._config(
            "B",
            f'[[entities]]\ngid = "{MAIN_B}"\nrole = "main"\ndelivery = "pull"\n'
            f'groups = ["{GROUP}"]\n'
            f'[[entities]]\ngid = "{WORKER_B}"\nrole = "worker"\ndelivery = "inject"\n'
            '[entities.injector]\ntype = "command"\n'
            f'command = ["sh", "-c", "echo $FLEET_MSG_ID >> {self.injected_file}"]\n'
            "timeout_s = 5.0\n",
        )
        self.procs = {
            "A": GatewayProc(a, self.root / "A.log", name="A"),
            "B": GatewayProc(b, self.root / "B.log", name="B"),
        }
        self._fresh_store("A")
        self.client = build_client(load_config(a), signer=signers["A"])
        self._signer_b = signers["B"]  # B's client is built in start(): after a rig moved B's store

    def start(self) -> None:
        t0 = time.monotonic()
        if self.client_b is None:  # creates B's store (schema at head) before B's gateway opens it
            assert self._signer_b is not None, "setup() first"
            self._fresh_store("B")
            self.client_b = build_client(load_config(self.procs["B"].config), signer=self._signer_b)
        for p in self.procs.values():
            p.start()
        client, client_b = self.client, self.client_b
        assert client is not None and client_b is not None
        ensure_pool_topic(self.config.bootstrap, self.topics, RUN_POOL, partitions=2)
        from confluent_kafka import Producer

        self._producer = Producer(producer_config(self.config.bootstrap))
        deadline = time.monotonic() + self.config.ready_timeout_s
        while not (
            client.knows(MAIN_B) and client.knows(WORKER_B) and client_b.knows(ASKER)
        ):  # fmt: skip
            if time.monotonic() > deadline:
                raise TimeoutError("main-b, worker-b and worker-a never became live in the rosters")
            self._note_running(t0)
            time.sleep(0.2)
        self._note_running(t0)
        with client_b.sessions.begin() as s:
            for run_id in RUNS:
                self.journal.start(s, tenant=TENANT, run_id=run_id)
        self._responder = threading.Thread(target=self._answer_loop, name="chaos-answers")
        self._responder.daemon = True
        self._answering.set()
        self._responder.start()
        self.timings["start_s"] = round(time.monotonic() - t0, 3)

    def _note_running(self, t0: float) -> None:
        """When each gateway printed its ``running`` line (a phase of the start-up)."""
        for name, p in self.procs.items():
            key = f"running_{name}_s"
            if key not in self.timings and p.ready():
                self.timings[key] = round(time.monotonic() - t0, 3)

    # -- the steady stream -------------------------------------------------------------------
    def send_one(self) -> None:
        """The next operation of the mix (:data:`MIX`)."""
        what = MIX[self.ops % len(MIX)]
        self.ops += 1
        if what == "reply":
            self._send(SENDER, MAIN_B, Kind.REPLY, DeliveryPath.PULL)
        elif what == "brief":
            self._send(SENDER, WORKER_B, Kind.SEND, DeliveryPath.INJECT)
        elif what == "ask":
            self._ask()
        elif what == "broadcast":
            self._broadcast()
        else:
            self._run_step(RUNS[self.ops % len(RUNS)])
        if self.ops % BAD_EVERY == 0:
            self._bad_record()

    def _bad_record(self) -> None:
        """A record no gateway may accept, straight to B's inbox, keyed to ``main-b``: its
        ``bad`` history row is written once the broker confirmed it (an unconfirmed one was
        never there to reject)."""
        variant = BAD_VARIANTS[self.bad % len(BAD_VARIANTS)]
        self.bad += 1
        topic = self.topics.inbox("B")
        env = Envelope.new(kind=Kind.REPLY, sender=SENDER, to=MAIN_B, body=b"bad", ttl_s=600)
        if variant == "garbage":  # only a msgId: no envelope at all
            key, headers, value = MAIN_B.encode(), [("msgId", env.msg_id.encode())], b"\xff\x00"
        else:
            key, headers, value = encode(env, topic=topic, signer=self._signers[variant])
            if variant == "forged":
                value = b"tampered"  # changed after A signed it

        def confirmed(err: Any, _msg: Any) -> None:
            if err is None:
                self.history.write(Op.BAD, msgId=env.msg_id, variant=variant, to=MAIN_B)

        self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=confirmed)
        self._producer.poll(0)

    def _refused(self, exc: FleetError, what: str) -> None:
        """Refused locally: never acknowledged, so not the checker's."""
        self.refused += 1
        self.history.write(Op.REJECTED, msgId="", reason=str(exc.reason), local=True, what=what)

    def _acknowledged(self, frm: str, to: str, kind: Kind, path: DeliveryPath, msg_id: str,
                      **extra: Any) -> None:  # fmt: skip
        seq = self.seq.get((frm, to), 0)
        self.seq[(frm, to)] = seq + 1
        if kind in (Kind.REPLY, Kind.SEND):
            self.sent += 1
        self.history.write(
            Op.SEND, msgId=msg_id, to=to, kind=str(kind), seq=seq, path=str(path),
            **{"from": frm}, **extra,
        )  # fmt: skip

    def _send(self, frm: str, to: str, kind: Kind, path: DeliveryPath) -> None:
        client = self.client
        assert client is not None
        body = f"{self.seq.get((frm, to), 0)}".encode()
        try:
            env = client.send(sender=frm, to=to, kind=kind, body=body)
        except FleetError as exc:
            self._refused(exc, str(kind))
            return
        self._acknowledged(frm, to, kind, path, env.msg_id)

    def _ask(self) -> None:
        client = self.client
        assert client is not None
        try:
            env = client.ask(sender=ASKER, to=MAIN_B, body=b"?", ttl_s=self.config.ask_ttl_s)
        except FleetError as exc:
            self._refused(exc, "ASK")
            return
        self._acknowledged(ASKER, MAIN_B, Kind.ASK, DeliveryPath.PULL, env.msg_id,
                           turnId=env.turn_id)  # fmt: skip

    def _broadcast(self) -> None:
        client = self.client
        assert client is not None
        msg_id = new_id()
        try:
            hosts = client.broadcast(sender=SENDER, group=GROUP, body=b"all hands", msg_id=msg_id)
        except FleetError as exc:
            self._refused(exc, "BROADCAST")
            return
        if hosts:  # none: legal silence (nobody in the group is live), nothing to check
            self.history.write(
                Op.BROADCAST, msgId=msg_id, group=GROUP, hosts=hosts, members=MEMBERS,
                **{"from": SENDER},
            )  # fmt: skip

    def _run_step(self, run_id: str, *, complete: bool = False) -> None:
        """One step of ``run_id`` (or its completion): the step's state and its outbox row in
        one transaction of B's store (seed 003), shipped by B's gateway relay."""
        client_b = self.client_b
        assert client_b is not None
        try:
            with client_b.sessions.begin() as s:
                if complete:
                    lsn = self.journal.complete(s, tenant=TENANT, run_id=run_id)
                    step, branch_key = 0, f"{TENANT}/{run_id}/b1"
                else:
                    rec = self.journal.step(
                        s, tenant=TENANT, run_id=run_id, state={"n": self.run_steps[run_id] + 1}
                    )
                    lsn, step, branch_key = rec.lsn, rec.step, rec.branch_key
        except FleetError as exc:
            self._refused(exc, "RUN")
            return
        except Exception as exc:  # noqa: BLE001 - a store write refused (disk full): not acknowledged
            self.refused += 1
            self.history.write(Op.REJECTED, msgId="", reason=type(exc).__name__, local=True,
                               what="RUN")  # fmt: skip
            return
        self.run_steps[run_id] += 0 if complete else 1
        self.history.write(Op.RUN_STEP, branchKey=branch_key, lsn=lsn, runId=run_id, step=step,
                           completed=complete)  # fmt: skip

    def _answer_loop(self) -> None:
        """main-b's side of the conversations: an open pull for the whole run (so an ASK never
        finds nobody listening), each ASK answered once through B's client."""
        client_b = self.client_b
        assert client_b is not None
        c = self.config
        # answers refused because the asker's host is between a clean stop and its next
        # announcement (UNKNOWN_RECIPIENT): tried again, as an agent would, until the ASK expires
        later: dict[str, tuple[str | None, float]] = {}
        with client_b.conversations.open_pull(MAIN_B, c.duration_s + c.drain_timeout_s + 300):
            while self._answering.is_set():
                try:
                    asks = client_b.poll(MAIN_B, kinds=[str(Kind.ASK)], limit=50)
                except Exception:  # noqa: BLE001 - B's store busy or full: again shortly
                    asks = []
                todo = [(m.msg_id, m.turn_id, time.monotonic() + c.ask_ttl_s) for m in asks]
                todo += [(a, t, until) for a, (t, until) in later.items()]
                later.clear()
                for ask_id, turn_id, until in todo:
                    if not self._answer(client_b, ask_id, turn_id, final=time.monotonic() > until):
                        later[ask_id] = (turn_id, until)
                time.sleep(0.1)

    def _answer(
        self, client_b: GatewayClient, ask_id: str, turn_id: str | None, *, final: bool
    ) -> bool:
        """True when settled (acknowledged, or refused for good); False: try again later."""
        try:
            env = client_b.answer(
                sender=MAIN_B, to=ASKER, turn_id=str(turn_id), body=ask_id.encode()
            )
        except FleetError as exc:
            if str(exc.reason) == "UNKNOWN_RECIPIENT" and not final:
                return False
            self._refused(exc, "ANSWER")
            return True
        except Exception as exc:  # noqa: BLE001 - the store refused the write: not acknowledged
            self.refused += 1
            self.history.write(Op.REJECTED, msgId="", reason=type(exc).__name__, local=True,
                               what="ANSWER")  # fmt: skip
            return True
        self._acknowledged(MAIN_B, ASKER, Kind.ANSWER, DeliveryPath.PULL, env.msg_id,
                           turnId=turn_id, askId=ask_id)  # fmt: skip
        return True

    def _loop(self) -> None:
        t0 = time.monotonic()
        interval = 1.0 / self.config.rate_per_s
        end = time.monotonic() + self.config.duration_s
        nxt = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < end:
            self.send_one()
            nxt += interval
            self._stop.wait(max(0.0, nxt - time.monotonic()))
        if self._producer is not None:  # the bad records' confirmations, on this thread only
            self._producer.flush(self.config.drain_timeout_s)
        self._end_of_stream()
        self.timings["stream_s"] = round(time.monotonic() - t0, 3)

    def _end_of_stream(self) -> None:
        """The outbox runs complete once the stream ends."""
        for run_id in RUNS:
            self._run_step(run_id, complete=True)

    def run_in_background(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="chaos-workload", daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    # -- progress, drain, collect ------------------------------------------------------------
    def outcomes(self) -> int:
        """REPLYs and briefs with an outcome so far (held at B, injected, FAILED at A): the
        measure of recovery after a fault."""
        held = collect.held_count(self.store_url("B"), MAIN_B, str(Kind.REPLY))
        failed = collect.held_count(self.store_url("A"), SENDER, "FAILED")
        return held + len(collect.injected_ids(self.injected_file)) + failed

    def snapshot(self) -> Iterator[dict[str, Any]]:
        """What the stores and the injector's file say happened so far, as history rows (all
        but the run topic, read once at the end)."""
        a, b = self.store_url("A"), self.store_url("B")
        yield from collect.held_rows(b, MAIN_B)
        yield from collect.held_rows(a, ASKER)
        for m in collect.injected_ids(self.injected_file):
            yield {"op": str(Op.INJECTED), "msgId": m, "to": WORKER_B}
        yield from collect.failed_receipts(a, SENDER)
        yield from collect.failed_receipts(a, ASKER)  # an ASK's expiry notice
        yield from collect.late_injected(a)
        yield from collect.inject_uncertain(a)
        inboxes = {self.topics.inbox(h): h for h in HOSTS}
        yield from collect.staged_rows(a, f"broadcast.{GROUP}".encode(), inboxes)
        for host in HOSTS:
            yield from collect.outbox_rows(self.store_url(host), self.topics.dlq, host,
                                           self.run_topic)  # fmt: skip

    def drain(self) -> bool:
        """Wait (bounded) until every acknowledged operation has an outcome - the checker's
        own reading of the stores (:func:`~.checker.pending`) - and B's relay has shipped every
        run row; then a quiet window in which a late duplicate would still show up."""
        t0 = time.monotonic()
        deadline = t0 + self.config.drain_timeout_s
        drained = False
        while time.monotonic() < deadline:
            # the whole history, not only what was acknowledged: some outcomes exist only there
            # (a nemesis's REJECTED rows, e.g. retention-gap's OFFSETS_LOST), and without them
            # the drain waited out its bound in every repetition of #18
            ours = list(read_history(self.history.path))
            if (
                collect.pending_rows(self.store_url("B"), self.run_topic) == 0
                and checker.pending([*ours, *self.snapshot()]) == 0
            ):
                drained = True
                break
            time.sleep(0.5)
        self.timings["drain_s"] = round(time.monotonic() - t0, 3)
        self._quiet_window()
        return drained

    def _quiet_window(self) -> None:
        """The quiet window, with each gateway's CPU seconds over it: the fleet has nothing to
        do now, so a gateway that burns a core is hot-looping (the checker's ``cpu`` rule).

        It opens once every live gateway has printed its ``running`` line (bounded by
        ``ready_timeout_s``): the drain can end while a gateway a fault restarted is still
        importing and joining (nothing was pending on it), and start-up is work, not a hot
        loop (chaos #4 at 20 repetitions: 1.8 CPU s of a restart's start-up in 3 s of quiet)."""
        self._await_running()
        before = {name: p.cpu_s() for name, p in self.procs.items()}
        t0 = time.monotonic()
        time.sleep(self.config.quiet_s)
        wall = time.monotonic() - t0
        for name, p in self.procs.items():
            start, end = before[name], p.cpu_s()
            if start is not None and end is not None:
                self.history.write(Op.CPU, name=name, cpu_s=round(end - start, 3),
                                   wall_s=round(wall, 3))  # fmt: skip
        self.timings["quiet_s"] = self.config.quiet_s

    def _await_running(self) -> None:
        """Until every live gateway has printed its current incarnation's ``running`` line,
        or ``ready_timeout_s`` has passed (the window then measures it starting: the checker
        sees the cost, nothing is hidden); its wait goes to the ``settle_s`` timing."""
        t0 = time.monotonic()
        deadline = t0 + self.config.ready_timeout_s
        while time.monotonic() < deadline and not all(
            p.ready() for p in self.procs.values() if p.alive
        ):
            time.sleep(0.1)
        self.timings["settle_s"] = round(time.monotonic() - t0, 3)

    def collect(self) -> None:
        t0 = time.monotonic()
        self._stop_answering()
        for name, p in self.procs.items():  # a supervisor would have to restart these
            if not p.alive:
                self.history.write(Op.EXITED, name=name, exit_code=p.exit_code)
        self.history.extend(self.snapshot())
        self.history.extend(collect.run_topic_rows(self.config.bootstrap, self.run_topic))
        self.timings["collect_s"] = round(time.monotonic() - t0, 3)

    def _stop_answering(self) -> None:
        self._answering.clear()
        if self._responder is not None:
            self._responder.join(10)

    def stop(self) -> None:
        """Stop the stream, the responder and both gateways (SIGTERM to each, then one wait:
        they shut down side by side)."""
        t0 = time.monotonic()
        self._stop.set()
        self.join()
        self._stop_answering()
        with contextlib.ExitStack() as waits:
            for p in self.procs.values():
                waits.callback(p.stop)
                p.terminate()
        self.timings.setdefault("stop_s", round(time.monotonic() - t0, 3))
