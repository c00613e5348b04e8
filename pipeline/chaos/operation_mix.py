"""The chaos workload's operation mix: each kind of operation the stream sends, and the
responder that answers the ASKs. The mix is the :class:`~.workload.Workload`'s through
:class:`OperationMix` (its state -- clients, counters, the history -- is the workload's).

One cycle of :data:`MIX`: REPLY ``main-a -> main-b`` (pull), SEND briefs ``main-a -> worker-b``
(inject), ASK ``worker-a -> main-b`` answered by ``main-b``, BROADCAST to ``crew``, run steps in
B's store (R-OUT-1), and every :data:`BAD_EVERY` operations a bad record straight to B's inbox.
Each locally acknowledged operation is a history row; a local refusal is a ``rejected`` row
marked ``local`` (never acknowledged, so not the checker's).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from pipeline.envelope import Envelope, Kind, Signer, encode
from pipeline.envelope.model import new_id
from pipeline.errors import FleetError
from pipeline.gateway.client import GatewayClient
from pipeline.kafka.topics import TopicNames
from pipeline.runs import RunJournal

from .history import DeliveryPath, HistoryWriter, Op
from .two_hosts import ASKER, GROUP, MAIN_B, MEMBERS, SENDER, WORKER_B
from .workload_config import WorkloadConfig

TENANT, RUNS = "chaos", ("r0", "r1")
RUN_POOL = "runs"  # the run topic is created as <prefix>pool.runs (ensure_pool_topic)
# one cycle of the mix: REPLY and SEND briefs stay the bulk (the planted bugs bite on them)
MIX = ("reply", "brief", "ask", "reply", "brief", "broadcast", "reply", "brief", "run", "run")
Stream = tuple[str, str]
BAD_EVERY = 20  # one bad record per this many operations of the mix (every 2 s at 10/s)
BAD_VARIANTS = ("garbage", "forged", "stranger")


class OperationMix:
    """The operations of the mix, as methods of the workload that sends them."""

    config: WorkloadConfig
    history: HistoryWriter
    topics: TopicNames
    client: GatewayClient | None
    client_b: GatewayClient | None
    journal: RunJournal
    seq: dict[Stream, int]
    sent: int  # REPLYs and briefs acknowledged (the nemesis's progress measure)
    ops: int
    refused: int
    bad: int  # bad records written to B's inbox
    run_steps: dict[str, int]
    _producer: Any  # the raw producer of the bad records
    _signers: dict[str, Signer]  # A's key, and a stranger's claiming to be A
    _answering: threading.Event

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
        one transaction of B's store (R-OUT-1), shipped by B's gateway relay."""
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
