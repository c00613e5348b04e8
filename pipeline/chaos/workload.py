"""The workload driver: two hosts as gateway processes and a steady stream of sends.

Host A runs ``main-a`` (pull); host B runs ``main-b`` (pull) and ``worker-b`` (inject, through a
command that appends ``$FLEET_MSG_ID`` to a file). The driver, on host A's store as a client,
alternates REPLYs ``main-a -> main-b`` (the reply/pull path, seed 000 §6) and briefs ``main-a ->
worker-b`` (the forward/inject path, §5) at ``rate_per_s`` for ``duration_s``, writing a ``send``
row per locally acknowledged send. After heal-and-drain, :meth:`Workload.collect` appends what
the stores and the file say happened.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.bootstrap_client import build_client
from pipeline.envelope import Kind, Signer
from pipeline.errors import FleetError
from pipeline.gateway.client import GatewayClient
from pipeline.gateway.config import load_config
from pipeline.kafka.topics import TopicNames
from pipeline.testing import unique_name

from . import collect
from .history import DeliveryPath, HistoryWriter, Op
from .procs import GatewayProc

HOSTS = ("A", "B")
SENDER, MAIN_B, WORKER_B = "main-a", "main-b", "worker-b"


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    bootstrap: str
    root: Path
    rate_per_s: float = 10.0
    duration_s: float = 20.0
    inject_deadline_s: float = 30.0  # the default: faults here last less
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
        self.injected_file = self.root / "injected.txt"
        self.seq: dict[str, int] = {MAIN_B: 0, WORKER_B: 0}
        self.sent = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.procs: dict[str, GatewayProc] = {}
        self.client: GatewayClient | None = None

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

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "trusted").mkdir(exist_ok=True)
        signers = {}
        for h in HOSTS:
            s = Signer.generate(h)
            s.write_private(self.root / f"{h}.key")
            s.write_public(self.root / "trusted" / f"{h}.pub")
            signers[h] = s
        self.injected_file.touch()
        a = self._config(
            "A",
            f'[[entities]]\ngid = "{SENDER}"\nrole = "main"\ndelivery = "pull"\n',
            extra=f"inject_deadline_s = {self.config.inject_deadline_s}",
        )
        b = self._config(
            "B",
            f'[[entities]]\ngid = "{MAIN_B}"\nrole = "main"\ndelivery = "pull"\n'
            f'[[entities]]\ngid = "{WORKER_B}"\nrole = "worker"\ndelivery = "inject"\n'
            '[entities.injector]\ntype = "command"\n'
            f'command = ["sh", "-c", "echo $FLEET_MSG_ID >> {self.injected_file}"]\n'
            "timeout_s = 5.0\n",
        )
        self.procs = {
            "A": GatewayProc(a, self.root / "A.log", name="A"),
            "B": GatewayProc(b, self.root / "B.log", name="B"),
        }
        self.client = build_client(load_config(a), signer=signers["A"])

    def start(self) -> None:
        for p in self.procs.values():
            p.start()
        client = self.client
        assert client is not None
        deadline = time.monotonic() + self.config.ready_timeout_s
        while not (client.knows(MAIN_B) and client.knows(WORKER_B)):
            if time.monotonic() > deadline:
                raise TimeoutError("main-b and worker-b never became live in A's roster")
            time.sleep(0.2)

    # -- the steady stream -------------------------------------------------------------------
    def send_one(self) -> None:
        client = self.client
        assert client is not None
        to = MAIN_B if self.sent % 2 == 0 else WORKER_B
        kind, path = (
            (Kind.REPLY, DeliveryPath.PULL) if to == MAIN_B else (Kind.SEND, DeliveryPath.INJECT)
        )
        seq = self.seq[to]
        try:
            env = client.send(sender=SENDER, to=to, kind=kind, body=f"{seq}".encode())
        except FleetError as exc:  # refused locally: not acknowledged, so not the checker's
            self.refused += 1
            self.history.write(Op.REJECTED, msgId="", reason=str(exc.reason), local=True)
            return
        self.seq[to] = seq + 1
        self.sent += 1
        self.history.write(
            Op.SEND, msgId=env.msg_id, to=to, kind=str(kind), seq=seq, path=str(path),
            **{"from": SENDER},
        )  # fmt: skip

    def _loop(self) -> None:
        interval = 1.0 / self.config.rate_per_s
        end = time.monotonic() + self.config.duration_s
        nxt = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < end:
            self.send_one()
            nxt += interval
            self._stop.wait(max(0.0, nxt - time.monotonic()))

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
        """Messages with an outcome so far (held at B, injected, FAILED at A): the measure of
        recovery after a fault."""
        held = collect.held_count(self.store_url("B"), MAIN_B)
        failed = collect.held_count(self.store_url("A"), SENDER, "FAILED")
        return held + len(collect.injected_ids(self.injected_file)) + failed

    def drain(self) -> bool:
        """Wait until every send has had a chance to land (bounded); then a quiet window."""
        deadline = time.monotonic() + self.config.drain_timeout_s
        drained = False
        while time.monotonic() < deadline:
            held = collect.held_count(self.store_url("B"), MAIN_B)
            # distinct briefs with an outcome: one both injected and FAILED counts once, so a
            # conflict cannot end the drain before another brief's FAILED is due
            briefs = (
                set(collect.injected_ids(self.injected_file))
                | {str(r["msgId"]) for r in collect.failed_receipts(self.store_url("A"), SENDER)}
                | set(collect.uncertain_ids(self.store_url("A")))
            )
            if held >= self.seq[MAIN_B] and len(briefs) >= self.seq[WORKER_B]:
                drained = True
                break
            time.sleep(0.5)
        time.sleep(self.config.quiet_s)
        return drained

    def collect(self) -> None:
        h = self.history
        h.extend(collect.held_rows(self.store_url("B"), MAIN_B))
        h.extend(
            {"op": str(Op.INJECTED), "msgId": m, "to": WORKER_B}
            for m in collect.injected_ids(self.injected_file)
        )
        h.extend(collect.failed_receipts(self.store_url("A"), SENDER))
        h.extend(collect.late_injected(self.store_url("A")))
        h.extend(collect.inject_uncertain(self.store_url("A")))
        for host in HOSTS:
            h.extend(collect.outbox_rows(self.store_url(host), self.topics.dlq, host))

    def stop(self) -> None:
        self._stop.set()
        self.join()
        for p in self.procs.values():
            p.stop()
