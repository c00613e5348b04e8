"""The workload driver: two hosts as gateway processes and a steady mix of operations.

Host A runs ``main-a`` (pull) and ``worker-a`` (pull); host B runs ``main-b`` (pull) and
``worker-b`` (inject, through a command that appends ``$FLEET_MSG_ID`` to a file); their
configs, keys and stores are written by :mod:`.two_hosts`. The driver uses the production
client on each host's store (:func:`~pipeline.bootstrap.client.build_client`, what
``fleet send|ask|answer|broadcast`` build) and the run journal (:class:`~pipeline.runs.RunJournal`)
and, at ``rate_per_s`` for ``duration_s``, cycles through (:mod:`.operation_mix`):

* REPLY ``main-a -> main-b`` (the reply/pull path, R-ACK-2);
* SEND briefs ``main-a -> worker-b`` (the forward/inject path, R-ACK-3);
* ASK ``worker-a -> main-b``, answered by a responder that keeps an open pull for ``main-b`` on
  B's store and sends each ASK's ANSWER ``main-b -> worker-a`` (R-CONV-2, R-CONV-3);
* BROADCAST ``main-a -> crew`` (``worker-a`` on A, ``main-b`` on B; R-TOP-6);
* run steps in B's store (two runs, a step each, a completion at the end; R-OUT-1): each step's
  state and its outbox row in one transaction, shipped by B's gateway relay;
* and, every :data:`~.operation_mix.BAD_EVERY` operations, a **bad record** written straight to
  B's inbox (what a buggy client or an attacker on the wire would put there): garbage, a REPLY
  whose body was changed after A signed it, or one signed by a key nobody trusts. B must
  dead-letter each with a reason, never hold it, and neither die nor hot-loop on it
  (R-ENV-4).

Each locally acknowledged operation is a history row. After heal-and-drain,
:meth:`Workload.collect` appends what the stores, the file and the run topic (through the fold)
say happened.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from pipeline.bootstrap.client import build_client
from pipeline.envelope import Kind, Signer
from pipeline.gateway.client import GatewayClient
from pipeline.host.config import load_config
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.runs import RunJournal
from pipeline.testing import unique_name
from pipeline.testing.rig import Rig

from . import checker, collect, two_hosts
from .gateway_process import GatewayProc
from .history import HistoryWriter, Op, read_history
from .operation_mix import RUN_POOL, RUNS, TENANT, OperationMix, Stream
from .two_hosts import ASKER, GROUP, HOSTS, MAIN_B, SENDER, WORKER_B
from .workload_config import WorkloadConfig

log = logging.getLogger(__name__)


class Workload(OperationMix):
    def __init__(self, config: WorkloadConfig, history: HistoryWriter) -> None:
        self.config = config
        self.history = history
        self.root = config.root
        self.prefix = unique_name("chaos").replace(".", "") + "."
        self.topics = TopicNames(prefix=self.prefix)
        self.rig = Rig(root=self.root, bootstrap=config.bootstrap, prefix=self.prefix)
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
        return self.rig.store_url(host)

    def _fresh_store(self, host: str) -> None:
        two_hosts.fresh_store(self.rig, host, tag=id(self))

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        signers = self.rig.write_keys(HOSTS)
        self._signers = {"forged": signers["A"], "stranger": Signer.generate("A")}  # not trusted
        self.injected_file.touch()
        configs = two_hosts.write_configs(
            self.rig,
            presence_ttl_s=self.config.presence_ttl_s,
            inject_deadline_s=self.config.inject_deadline_s,
            injected_file=self.injected_file,
        )
        self.procs = {h: GatewayProc(configs[h], self.root / f"{h}.log", name=h) for h in HOSTS}
        self._fresh_store("A")
        self.client = build_client(load_config(configs["A"]), signer=signers["A"])
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
            # the drain waited out its bound in every repetition of retention-gap
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
        loop (twin-host at 20 repetitions: 1.8 CPU s of a restart's start-up in 3 s of quiet)."""
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
