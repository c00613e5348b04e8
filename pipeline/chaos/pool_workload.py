"""The worker-pool workload: keyed events submitted at a rate to a pool of member processes.

``fleet pool run`` members (``python -m pipeline pool run --handler
pipeline.chaos.pool_steps:step``), N of them on one SQLite store, consume ``fleet.pool.<pool>``
(a fresh pool per repetition). The driver produces one record per tick: key ``k<n>`` (round
robin over ``keys``), value ``{"key", "seq", "step_s", "poison"}`` with ``seq`` counting per key,
a fresh ``msgId`` header (the event id the pool dedupes on); a record the broker confirmed is a
``send`` row (``msgId``, ``key``, ``seq``, ``partition``, ``poison``). A spec with ``poison_at_s``
submits one poison record that many seconds into the stream (its step always raises).

After heal-and-drain :meth:`PoolWorkload.collect` appends what the store says: ``applied`` (one
per effect row: member, partition, offset, start and end), ``parked`` (records behind a
quarantined key), ``dead_letter`` (the quarantine's copy of a dead-lettered record, with the
reason), ``quarantined`` (a key, its reason) and ``attempt`` (a failed step, from the members'
``--events`` files). :mod:`.pool_checker` judges them.

A member's name is ``<instance>.<incarnation>`` (``m1.2``: instance ``m1``, second start), so the
effect rows say which process applied what; with ``static`` the instance is its
``--instance-id``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from pipeline.errors import BrokerError
from pipeline.kafka.clients import new_producer
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.pool.status import pool_status
from pipeline.pool.tables import effects_table
from pipeline.record_headers import unpack_headers
from pipeline.store import make_engine
from pipeline.testing import unique_name

from .gateway_process import GatewayProc
from .history import HistoryWriter, Op
from .workload import Workload
from .workload_config import WorkloadConfig


class PoolOp:
    """The pool workload's own history operations (beside :class:`~.history.Op`'s ``send``,
    ``dead_letter``, ``fault``, ``heal``, ``recovered``)."""

    APPLIED = "applied"
    PARKED = "parked"
    QUARANTINED = "quarantined"
    ATTEMPT = "attempt"


@dataclass(frozen=True, kw_only=True)
class PoolSpec:
    """The pool under test: members, partitions, keys, the step and the membership."""

    members: int = 3
    partitions: int = 6
    keys: int = 12
    step_s: float = 0.1
    static: bool = False  # --instance-id m<i>: static membership
    concurrency: str = "partition"  # or "key"
    session_timeout_ms: int = 6_000
    retry: str = "0.5:2:5:0"  # waits 0.5, 1, 2, 4 s between five attempts
    poison_at_s: float | None = None  # one poison record this far into the stream
    revoke_wait_s: float = 5.0
    step_lease_s: float = 4.0  # a member killed mid-step frees its step this soon


class MemberProc(GatewayProc):
    """One pool member as a process; each start is a new incarnation ``<instance>.<n>``."""

    def __init__(self, workload: PoolWorkload, instance: str) -> None:
        super().__init__(
            workload.root / f"{instance}.member", workload.root / f"{instance}.log", name=instance
        )
        self.workload = workload

    @property
    def member(self) -> str:
        return f"{self.name}.{self.starts}"

    def command(self) -> list[str]:
        w, spec = self.workload, self.workload.spec
        incarnation = f"{self.name}.{self.starts + 1}"
        args = [
            "pool", "run", "--pool", w.pool, "--bootstrap", w.config.bootstrap,
            "--store-url", w.pool_store, "--handler", "pipeline.chaos.pool_steps:step",
            "--member", incarnation, "--events", str(w.root / f"events-{incarnation}.jsonl"),
            "--assignment", "cooperative-sticky", "--concurrency", spec.concurrency,
            "--session-timeout-ms", str(spec.session_timeout_ms),
            "--revoke-wait", str(spec.revoke_wait_s), "--step-lease", str(spec.step_lease_s),
            "--retry", spec.retry, "--partitions", str(spec.partitions), "--no-purge",
        ]  # fmt: skip
        if spec.static:
            args += ["--instance-id", self.name]
        return args


class PoolWorkload(Workload):
    """:class:`~.workload.Workload`'s life cycle (setup, start, stream, drain, collect, stop) for
    a worker pool; ``procs`` are the members the nemesis kills and restarts, ``extras`` the
    members a storm adds and takes away."""

    spec = PoolSpec()

    def __init__(
        self, config: WorkloadConfig, history: HistoryWriter, spec: PoolSpec | None = None
    ) -> None:
        super().__init__(config, history)
        if spec is not None:
            self.spec = spec
        self.pool = unique_name("chaos").replace(".", "-")
        self.topic = TopicNames().pool(self.pool)
        self.group = TopicNames().pool_group(self.pool)
        self.pool_store = f"sqlite:///{self.root / 'pool.sqlite'}"
        self.key_seq: Counter[str] = Counter()
        self.poison_sent = False
        self.extras: list[MemberProc] = []
        self._producer: Any = None
        self._t0 = 0.0

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ensure_pool_topic(
            self.config.bootstrap, TopicNames(), self.pool, partitions=self.spec.partitions
        )
        self.procs = {f"m{i}": MemberProc(self, f"m{i}") for i in range(self.spec.members)}
        self._producer = new_producer(producer_config(self.config.bootstrap))

    def start(self) -> None:
        """Start every member and wait until the group is stable with all of them owning every
        partition, so the stream starts on a settled assignment."""
        for p in self.procs.values():
            p.start()
        deadline = time.monotonic() + self.config.ready_timeout_s
        while not self.settled(len(self.procs)):
            dead = [p for p in self.procs.values() if not p.alive]
            if dead:  # a member that cannot start: say so now, with what its log says
                why = "\n".join(
                    f"--- {p.name} exited {p.exit_code}, its log ends:\n{p.tail()}" for p in dead
                )
                raise RuntimeError(
                    f"pool member(s) {[p.name for p in dead]} exited while starting\n{why}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"pool {self.pool} never settled with {len(self.procs)} members")
            time.sleep(0.5)

    def settled(self, members: int) -> bool:
        try:
            st = pool_status(self.config.bootstrap, self.pool)
        except BrokerError:  # e.g. the coordinator still loading on a busy broker
            return False
        owned = sorted(p for ps in st.members.values() for p in ps)
        return (
            st.state == "STABLE"
            and len(st.members) == members
            and owned == list(range(self.spec.partitions))
        )

    def add_member(self) -> MemberProc:
        """A storm's extra member, started now (not restarted by a heal)."""
        p = MemberProc(self, f"x{len(self.extras)}")
        self.extras.append(p)
        p.start()
        return p

    def stepped(self, member: str) -> bool:
        """True once incarnation ``member`` started a step (its ``--events`` file has a line)."""
        path = self.root / f"events-{member}.jsonl"
        return path.exists() and path.stat().st_size > 0

    # -- the steady stream -------------------------------------------------------------------
    def send_one(self) -> None:
        if not self._t0:
            self._t0 = time.monotonic()
        spec = self.spec
        poison = (
            spec.poison_at_s is not None
            and not self.poison_sent
            and time.monotonic() - self._t0 >= spec.poison_at_s
        )
        key = f"k{self.sent % spec.keys}"
        seq = self.key_seq[key]
        msg_id = uuid.uuid4().hex
        body = {"key": key, "seq": seq, "step_s": spec.step_s, "poison": poison}
        report: list[Any] = []
        self._producer.produce(
            self.topic,
            key=key.encode(),
            value=json.dumps(body).encode(),
            headers=[("msgId", msg_id.encode())],
            on_delivery=lambda err, msg: report.append((err, msg)),
        )
        self._producer.flush(10)
        if not report or report[0][0] is not None:
            self.refused += 1
            reason = str(report[0][0]) if report else "UNCONFIRMED"
            self.history.write(Op.REJECTED, msgId=msg_id, reason=reason, local=True)
            return
        self.key_seq[key] = seq + 1
        self.sent += 1
        self.poison_sent = self.poison_sent or poison
        self.history.write(
            Op.SEND, msgId=msg_id, key=key, seq=seq, partition=report[0][1].partition(),
            poison=poison,
        )  # fmt: skip

    # -- progress, drain, collect ------------------------------------------------------------
    def outcomes(self) -> int:
        """Events with an outcome so far: applied (distinct event ids) or parked/dead-lettered."""
        engine = make_engine(self.pool_store, create=False)
        try:
            with engine.connect() as c:
                applied = c.execute(
                    select(func.count(func.distinct(effects_table.c.event_id))).where(
                        effects_table.c.scope == self.group
                    )
                ).scalar_one()
                parked = sum(1 for _ in _parked(c, self.group))
        except Exception:  # noqa: BLE001 - tables not there yet, or the store busy: no progress
            return 0
        finally:
            engine.dispose()
        return int(applied) + parked

    def _end_of_stream(self) -> None:
        """A pool's stream has no outbox runs to complete (no gateways, no host B)."""

    def drain(self) -> bool:
        deadline = time.monotonic() + self.config.drain_timeout_s
        drained = False
        while time.monotonic() < deadline:
            if self.outcomes() >= self.sent:
                drained = True
                break
            time.sleep(0.5)
        time.sleep(self.config.quiet_s)
        return drained

    def collect(self) -> None:
        engine = make_engine(self.pool_store, create=False)
        h = self.history
        try:
            with engine.connect() as c:
                h.extend(_applied(c, self.group))
                h.extend(_parked(c, self.group))
                h.extend(_quarantined(c, self.group))
        finally:
            engine.dispose()
        for path in sorted(self.root.glob("events-*.jsonl")):
            h.extend(_attempts(path))

    def stop(self) -> None:
        self._stop.set()
        self.join()
        for p in [*self.procs.values(), *self.extras]:
            p.stop()
        if self._producer is not None:
            self._producer.flush(5)


def _applied(c: Any, group: str) -> Iterator[dict[str, Any]]:
    e = effects_table.c
    q = select(
        e.id, e.event_id, e.partition, e.offset, e.key, e.member, e.started_ms, e.ended_ms,
        e.reused,
    ).where(e.scope == group).order_by(e.id)  # fmt: skip
    for r in c.execute(q):
        yield {
            "op": PoolOp.APPLIED, "msgId": r.event_id, "id": r.id, "partition": r.partition,
            "offset": r.offset, "key": r.key, "member": r.member, "started_ms": r.started_ms,
            "ended_ms": r.ended_ms, "reused": bool(r.reused),
        }  # fmt: skip


def _parked(c: Any, group: str) -> Iterator[dict[str, Any]]:
    """Records behind a quarantined key (``parked``) and the dead-lettered record's copy
    (``dead_letter``, sequence 0), with the key's reason."""
    from pipeline.failures.quarantine_tables import parked_table, quarantine_table

    p, q = parked_table.c, quarantine_table.c
    reasons = {r.key: r.reason for r in c.execute(select(q.key, q.reason).where(q.grp == group))}
    rows = c.execute(
        select(p.key, p.seq, p.dead_letter, p.partition, p.offset, p.headers, p.parked_ms)
        .where(p.grp == group)
        .order_by(p.id)
    )
    for r in rows:
        mid = next((bytes(v).decode() for k, v in unpack_headers(r.headers) if k == "msgId"), "")
        op = Op.DEAD_LETTER if r.dead_letter else PoolOp.PARKED
        yield {
            "op": str(op), "msgId": mid, "key": r.key, "seq": r.seq, "partition": r.partition,
            "offset": r.offset, "reason": reasons.get(r.key, ""), "t_ms": r.parked_ms,
        }  # fmt: skip


def _quarantined(c: Any, group: str) -> Iterator[dict[str, Any]]:
    from pipeline.failures.quarantine_tables import quarantine_table

    q = quarantine_table.c
    for r in c.execute(select(q.key, q.reason, q.quarantined_ms).where(q.grp == group)):
        yield {"op": PoolOp.QUARANTINED, "key": r.key, "reason": r.reason, "t_ms": r.quarantined_ms}


def _attempts(path: Path) -> Iterator[dict[str, Any]]:
    """Failed steps from one member's ``--events`` file (a line cut by kill -9 is skipped)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("kind") == "error":
            yield {
                "op": PoolOp.ATTEMPT, "msgId": ev["event_id"], "member": ev["member"],
                "key": ev.get("key"), "started_ms": ev["start_ms"], "ended_ms": ev["end_ms"],
            }  # fmt: skip
