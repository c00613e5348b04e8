"""Broker-side and environment faults: issue 12's catalogue #7, #9, #11-#14 and #16.

Each fault here is an :data:`~pipeline.chaos.nemesis.Action` (do the fault, hold it, heal it)
and, where the fault needs apparatus, a rig (a proxy, a small filesystem, a clock-skew shim) that
lives for one repetition. The cluster faults run on the scenario's own brokers - three KRaft
nodes (RF 3, min ISR 2) for the leader faults - never on a shared one. A heal waits (bounded)
until every partition of the run's topics has its full ISR again, so the next fault starts from
a healthy cluster and "five leader kills" means five, not a pile-up that loses quorum.

How each fault is made on this machine (we run as root, loopback only) is in ``docs/chaos.md``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.kafka.local import LauncherConfig, LocalCluster
from pipeline.kafka.local.ports import free_ports
from pipeline.kafka.local.probe import node_answers

from .history import HistoryWriter
from .nemesis import Fault, NemesisContext, Scenario
from .proxy import CutProxy, running
from .workload import Workload, WorkloadConfig

T = TypeVar("T")
ISR_BOUND_S = 90.0
# how long a restarted B gets to either stop with OFFSETS_LOST or commit past the deleted range
# (a gateway start takes 10-100 s on this shared machine)
RETENTION_VERDICT_S = 240.0
BROKER_SESSION_S = 9.0  # KRaft broker.session.timeout.ms: the controller fences a silent broker
CUT_LISTENER = "CUT"
CLOCK_SKEW_S = 30.0  # gateway config clock_skew_s (the workload keeps the default)


# -- the cluster --------------------------------------------------------------------------------
def _cluster(ctx: NemesisContext) -> LocalCluster:
    assert ctx.cluster is not None, "a broker fault needs the scenario's own brokers"
    return ctx.cluster


def _hot_partition(ctx: NemesisContext, topic: str) -> int:
    """A partition of ``topic`` that carries the stream (it has records), drawn by the seed."""
    cluster = _cluster(ctx)
    probe = Consumer({**cluster.client_config(), "group.id": "chaos-probe", "log_level": 0})
    try:
        meta = probe.list_topics(topic, timeout=10).topics[topic]
        busy = [
            p
            for p in sorted(meta.partitions)
            if probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] > 0
        ]
    finally:
        probe.close()
    return int(ctx.rng.choice(busy or sorted(meta.partitions)))


def wait_full_isr(cluster: LocalCluster, prefix: str, bound_s: float = ISR_BOUND_S) -> float:
    """Wait until every partition of the run's topics (``prefix``) has all nodes in its ISR;
    returns the seconds waited (``bound_s`` when it never happened)."""
    want = len(cluster.nodes)
    admin = AdminClient({**cluster.client_config(), "log_level": 0})
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        with contextlib.suppress(Exception):  # a node still starting: not yet
            md = admin.list_topics(timeout=5)
            parts = [
                p for name, t in md.topics.items() if name.startswith(prefix)
                for p in t.partitions.values()
            ]  # fmt: skip
            if parts and all(len(p.isrs) >= want and p.leader >= 0 for p in parts):
                return round(time.monotonic() - t0, 3)
        time.sleep(0.5)
    return bound_s


def wait_node(cluster: LocalCluster, node_id: int, bound_s: float = ISR_BOUND_S) -> float | None:
    """Seconds until node ``node_id`` itself answers (an ApiVersions request on its own
    listener: :mod:`pipeline.kafka.local.probe`), None when it did not within ``bound_s``."""
    port = cluster.node(node_id).spec.port
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if node_answers(port):
            return round(time.monotonic() - t0, 3)
        time.sleep(0.3)
    return None


def _back(ctx: NemesisContext, node_id: int) -> dict[str, Any]:
    """The node answers again, then every partition of the run has its full ISR."""
    cluster = _cluster(ctx)
    answered = wait_node(cluster, node_id)
    return {"answered_s": answered, "isr_s": wait_full_isr(cluster, ctx.workload.prefix)}


def _restart_node(ctx: NemesisContext, node_id: int) -> dict[str, Any]:
    cluster = _cluster(ctx)
    cluster.restart(node_id, wait=False)  # stop (a no-op on a dead node), start on its data
    return _back(ctx, node_id)


def _leader_kill9(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    cluster, topic = _cluster(ctx), ctx.workload.topics.inbox("B")
    partition = _hot_partition(ctx, topic)
    leader = cluster.leader_of(topic, partition)
    cluster.kill(leader)
    time.sleep(down)
    detail = {"topic": topic, "partition": partition, "down_s": round(down, 3)}
    return f"node-{leader}", {**detail, **_restart_node(ctx, leader)}


def _leader_pause(ctx: NemesisContext, stopped: float) -> tuple[str, dict[str, Any]]:
    cluster, topic = _cluster(ctx), ctx.workload.topics.inbox("B")
    partition = _hot_partition(ctx, topic)
    leader = cluster.leader_of(topic, partition)
    cluster.pause(leader)
    time.sleep(stopped)
    cluster.resume(leader)
    detail = {"topic": topic, "partition": partition, "stopped_s": round(stopped, 3)}
    return f"node-{leader}", {**detail, **_back(ctx, leader)}


# The roll's bound: each node answering (ISR_BOUND_S) and its ISR full again (ISR_BOUND_S).
ROLL_BOUND_S = 3 * 2 * ISR_BOUND_S


def _roll_workload(cfg: WorkloadConfig, history: HistoryWriter) -> Workload:
    """The workload with ASKs that outlive a whole roll and the drain after it. The asker reads
    its ANSWERs at the end: with the default 60 s an ANSWER held on time at its gateway, but
    undrained when a slow roll ran past its ``expiresAt``, was swept ``EXPIRED`` -- a dead letter,
    so a finding of a strict scenario that the fleet did not cause."""
    return Workload(
        replace(cfg, ask_ttl_s=ROLL_BOUND_S + cfg.duration_s + cfg.drain_timeout_s), history
    )


def _rolling_restart(ctx: NemesisContext, pause: float) -> tuple[str, dict[str, Any]]:
    """One roll: each node in turn stopped cleanly (SIGTERM: controlled shutdown moves its
    leaders away first), started on its data, and the full ISR awaited before the next."""
    cluster = _cluster(ctx)
    steps = []
    for node in cluster.nodes:
        steps.append({"node": node.spec.node_id, **_restart_node(ctx, node.spec.node_id)})
        time.sleep(pause)
    return "all nodes", {"steps": steps}


def _logdir_unwritable(ctx: NemesisContext, bound: float) -> tuple[str, dict[str, Any]]:
    """``chattr +i`` on a leader's log directory. As root, ``chmod`` stops nothing
    (CAP_DAC_OVERRIDE); an immutable directory refuses new files and renames even to root,
    which is what the broker's checkpoint writes (``*.tmp`` then rename) need, so the broker
    meets the failure on its own schedule: the log dir goes offline and, being its only one,
    the broker halts. Heal: ``chattr -i`` and restart the node on its data."""
    cluster, topic = _cluster(ctx), ctx.workload.topics.inbox("B")
    partition = _hot_partition(ctx, topic)
    leader = cluster.leader_of(topic, partition)
    node = cluster.node(leader)
    data = node.directory / "data"
    subprocess.run(["chattr", "+i", str(data)], check=True)
    t0 = time.monotonic()
    try:
        while node.is_running() and time.monotonic() - t0 < bound:
            time.sleep(0.2)
    finally:
        subprocess.run(["chattr", "-i", str(data)], check=True)
    halted = not node.is_running()
    detail = {
        "topic": topic,
        "partition": partition,
        "halted": halted,
        "unwritable_s": round(time.monotonic() - t0, 3),
        "log_dir_failure": "all log dirs" in node.server_log.read_text(errors="replace")
        if node.server_log.exists()
        else False,
    }
    return f"node-{leader}", {**detail, **_restart_node(ctx, leader)}


# -- a client cut off (#11) ---------------------------------------------------------------------
def broker_with_cut_listener(directory: Path) -> LocalCluster:
    """One node with a second listener for the gateway under test, advertised as the proxy."""
    bind, advertised = free_ports(2)
    cfg = LauncherConfig(
        directory=directory, nodes=1, heap_mb=512,
        extra_listeners={CUT_LISTENER: (bind, advertised)},
    )  # fmt: skip
    return LocalCluster(cfg, owned=True).start()


def set_bootstrap(config: Path, bootstrap: str) -> None:
    text = config.read_text()
    config.write_text(re.sub(r'(?m)^bootstrap = ".*"$', f'bootstrap = "{bootstrap}"', text))


@contextlib.contextmanager
def cut_rig(w: Workload, cluster: LocalCluster | None) -> Iterator[CutProxy]:
    assert cluster is not None
    bind, advertised = cluster.config.extra_listeners[CUT_LISTENER]
    set_bootstrap(w.procs["B"].config, f"127.0.0.1:{advertised}")
    with running(advertised, bind) as proxy:
        yield proxy


def _cut_off(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    proxy: CutProxy = ctx.rig
    proxy.cut()
    time.sleep(hold)
    proxy.heal()
    return "B", {"cut_s": round(hold, 3), "connections": proxy.connections}


# -- the store's disk full (#13) ----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SmallDisk:
    mount: Path
    size_mb: int


@contextlib.contextmanager
def small_disk_rig(
    w: Workload, _cluster: LocalCluster | None, size_mb: int = 24
) -> Iterator[SmallDisk]:
    """Host B's SQLite store on a tmpfs of ``size_mb`` (mounted here; we are root). The store
    path stays ``<root>/B.sqlite``, a symlink SQLite resolves, so its journal lands on the
    small disk too."""
    mount = w.root / "B-disk"
    mount.mkdir(exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "chaos-store", str(mount)], check=True
    )
    try:
        (w.root / "B.sqlite").symlink_to(mount / "B.sqlite")
        yield SmallDisk(mount=mount, size_mb=size_mb)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path) -> int:
    """Write a ballast file until the filesystem says ENOSPC; returns its size in bytes."""
    chunk = b"\0" * (256 * 1024)
    written = 0
    with (mount / "ballast").open("wb", buffering=0) as f:
        try:
            while True:
                written += f.write(chunk) or 0
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return written


def _store_full(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    disk: SmallDisk = ctx.rig
    ballast = fill(disk.mount)
    time.sleep(hold)
    (disk.mount / "ballast").unlink()
    return "B store", {"full_s": round(hold, 3), "ballast_bytes": ballast}


# -- one gateway's clock skewed (#16) -----------------------------------------------------------
# Only the skewed gateway's Python wall clock moves: a sitecustomize.py on its PYTHONPATH offsets
# time.time and time.time_ns, through which every wall-clock reading of the fleet goes (envelope
# ts and expiresAt, presence ts, deadlines, the verifier's "now"); the monotonic clock, timed
# waits and librdkafka are untouched, as on a host whose NTP is off. libfaketime (LD_PRELOAD) was
# used first and is unusable here: with any offset the process's librdkafka never completes a
# metadata request (libfaketime 0.9.10, librdkafka 2.16: a bare AdminClient.list_topics times out
# at -20 s and fails with a transport error at +20 s, while the broker connection itself comes
# up), so the "skewed" gateway never got past its topology step and never ran.
SKEW_ENV = "FLEET_CHAOS_CLOCK_OFFSET_S"
_SHIM = f'''"""chaos clock-skew shim (pipeline/chaos/cluster_faults.py): wall clock + {SKEW_ENV}."""
import os
import time

_offset_s = float(os.environ.get("{SKEW_ENV}", "0"))
if _offset_s:
    _time, _time_ns, _offset_ns = time.time, time.time_ns, round(_offset_s * 1e9)
    time.time = lambda: _time() + _offset_s
    time.time_ns = lambda: _time_ns() + _offset_ns
'''
SKEWED_READY_S = 120.0  # bound on the skewed gateway's start (slow on a loaded machine)


@dataclass(kw_only=True)
class SkewRig:
    shim: Path
    faults: int = 0


@contextlib.contextmanager
def skew_rig(w: Workload, _cluster: LocalCluster | None) -> Iterator[SkewRig]:
    yield SkewRig(shim=write_skew_shim(w.root))


def write_skew_shim(root: Path) -> Path:
    """The directory to put on a skewed gateway's PYTHONPATH (:func:`skew_env`)."""
    shim = root / "clock-skew-shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SHIM)
    return shim


def skew_env(shim: Path, offset_s: float) -> dict[str, str]:
    """The environment of a gateway whose wall clock is off by ``offset_s``."""
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    return {SKEW_ENV: f"{offset_s:+.3f}", "PYTHONPATH": path}


def _clock_skew(ctx: NemesisContext, hold: float) -> tuple[str, dict[str, Any]]:
    """Restart host B with its wall clock off by an offset inside ``clock_skew_s`` (odd faults)
    or beyond it (even ones), sign drawn by the seed; ``hold`` counts from B's running line (a
    skew that never ran proves nothing); the heal restarts it on the true clock."""
    rig: SkewRig = ctx.rig
    beyond = rig.faults % 2 == 1
    rig.faults += 1
    size = ctx.rng.uniform(1.5, 3.0) if beyond else ctx.rng.uniform(0.2, 0.7)
    offset = ctx.rng.choice((-1, 1)) * size * CLOCK_SKEW_S
    b = ctx.workload.procs["B"]
    before = dict(b.env)
    b.stop()
    b.env = {**before, **skew_env(rig.shim, offset)}
    b.start()
    t0 = time.monotonic()
    while not b.ready() and b.alive and time.monotonic() - t0 < SKEWED_READY_S:
        time.sleep(0.2)
    ran = b.ready()
    ready_s = time.monotonic() - t0
    if ran:
        time.sleep(hold)
    b.stop()
    b.env = before
    b.start()
    return "B", {
        "offset_s": round(offset),
        "beyond": beyond,
        "skewed_ran": ran,
        "skewed_ready_s": round(ready_s, 3),
        "skewed_s": round(hold, 3) if ran else 0.0,
    }


# -- an offset that fell off retention while a gateway was down (#18) ---------------------------
def _retrying(call: Callable[[], T], bound_s: float = 60.0) -> T:
    """``call`` until it succeeds or ``bound_s`` passes: a coordinator just after a restart
    answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for a while."""
    t0 = time.monotonic()
    while True:
        try:
            return call()
        except KafkaException:
            if time.monotonic() - t0 > bound_s:
                raise
            time.sleep(0.5)


def _unread(
    cluster_conf: dict[str, Any], group: str, topic: str
) -> dict[int, tuple[int, int, list[str]]]:
    """Per partition of ``topic``: (committed, high watermark, msgIds in between) for ``group``,
    read without joining the group."""
    probe = Consumer(
        {**cluster_conf, "group.id": group, "enable.auto.commit": False, "log_level": 0}
    )
    out: dict[int, tuple[int, int, list[str]]] = {}
    try:
        parts = sorted(probe.list_topics(topic, timeout=10).topics[topic].partitions)
        committed = _retrying(
            lambda: probe.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        )
        for tp in committed:
            low, high = probe.get_watermark_offsets(tp, timeout=10, cached=False)
            start = max(tp.offset, low) if tp.offset >= 0 else low
            ids: list[str] = []
            if start < high:
                probe.assign([TopicPartition(topic, tp.partition, start)])
                deadline = time.monotonic() + 20
                while len(ids) < high - start and time.monotonic() < deadline:
                    msg = probe.poll(0.5)
                    if msg is None or msg.error() or (msg.offset() or 0) >= high:
                        continue
                    head = dict(msg.headers() or [])
                    raw = head.get("msgId")
                    ids.append(raw.decode() if isinstance(raw, bytes) else str(raw or ""))
                probe.unassign()
            out[tp.partition] = (tp.offset, high, ids)
    finally:
        probe.close()
    return out


def _committed(conf: dict[str, Any], group: str, topic: str) -> dict[int, int]:
    probe = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "log_level": 0})
    try:
        parts = probe.list_topics(topic, timeout=10).topics[topic].partitions
        got = probe.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    except KafkaException:
        return {}
    finally:
        probe.close()


def _retention_gap(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    """kill -9 host B; while it is down A keeps sending and retention deletes everything B has
    not read (DeleteRecords to the high watermark - what retention does, made deterministic, as
    in tests/integration/test_offsets_lost.py); restart B. Defined behaviour (seed 001 scenario
    7): B refuses to resume - OFFSETS_LOST, exit 3 - and only the operator's deliberate reset of
    the group to the log start lets it go on. Each deleted unread send is written to the history
    as refused with reason OFFSETS_LOST *only if B said so*; a silent skip leaves them lost."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    w = ctx.workload
    cluster = _cluster(ctx)
    conf = cluster.client_config()
    b = w.procs["B"]
    topic, group = w.topics.inbox("B"), w.topics.gateway_group("B")
    b.kill9()
    time.sleep(down)
    unread = _unread(conf, group, topic)
    admin = AdminClient({**conf, "log_level": 0})
    doomed = [TopicPartition(topic, p, high) for p, (_c, high, ids) in unread.items() if ids]
    if doomed:
        for fut in admin.delete_records(doomed).values():
            fut.result(timeout=30)
    log_before = len(b.output())
    b.start()
    t0 = time.monotonic()
    skipped = False  # B committed past the deleted range: it resumed without a word
    while b.alive and not skipped and time.monotonic() - t0 < RETENTION_VERDICT_S:
        time.sleep(2.0)
        now = _committed(conf, group, topic)
        skipped = any(now.get(p, -1) > c for p, (c, _h, ids) in unread.items() if ids)
    said = b.output()[log_before:]
    refused = b.exit_code == 3 and ("OFFSETS_LOST" in said or "fell off retention" in said)
    reported = refused or "deleted before group" in said  # never committed: an ERROR line
    deleted = [m for _c, _h, ids in unread.values() for m in ids]
    if reported:
        ctx.history.extend(
            {
                "op": "rejected",
                "msgId": m,
                "reason": "OFFSETS_LOST",
                "by": "B",
                "source": "retention",
            }
            for m in deleted
        )
    if b.alive:  # it resumed without a word: stop it before the reset, which needs an empty group
        b.stop()
    reset = [TopicPartition(topic, p, high) for p, (_c, high, _ids) in unread.items()]

    def reset_group() -> None:  # the operator's deliberate act (docs/failures.md, runbook 5)
        # Refused per partition (not raised) while the group is not empty: B's static member
        # stays in it until its session times out, even after B exited.
        groups = [ConsumerGroupTopicPartitions(group, reset)]
        for fut in admin.alter_consumer_group_offsets(groups).values():
            done = fut.result(timeout=30)
            errors = [tp.error for tp in done.topic_partitions or [] if tp.error is not None]
            if errors:
                raise KafkaException(errors[0])

    _retrying(reset_group)
    b.start()
    detail = {
        "deleted_unread": len(deleted),
        "reported": reported,
        "refused": refused,
        "silent_skip": skipped,
        "verdict_s": round(time.monotonic() - t0, 3),
        "exit_code": b.exit_code,
        "down_s": round(down, 3),
    }
    return "B", detail


# -- the catalogue rows ------------------------------------------------------------------------
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="leader-kill9",
            number=7,
            fault=Fault.LEADER_KILL9,
            action=_leader_kill9,
            checks="seed 001 'at-least-once': acks=all with min ISR 2 makes a delivery report a "
            "promise; kill -9 of the node leading a busy partition of B's inbox, five times, on "
            "three nodes (RF 3, min ISR 2); nothing acknowledged is lost, nothing applied twice",
            own_broker=True,
            nodes=3,
            max_faults=5,
            duration_s=50.0,
            first_s=(2.0, 3.0),
            hold_s=(0.5, 2.0),
            gap_s=(0.5, 1.5),
        ),
        Scenario(
            name="paused-leader",
            number=9,
            fault=Fault.LEADER_PAUSE,
            action=_leader_pause,
            checks="seed 001 'at-least-once' under a zombie leader: SIGSTOP of the node leading "
            "a busy partition of B's inbox, inside and past broker.session.timeout.ms (9 s), "
            "then SIGCONT; the fenced leader cannot take an acks=all write alone",
            own_broker=True,
            nodes=3,
            max_faults=3,
            duration_s=40.0,
            hold_s=(3.0, 14.0),
            gap_s=(1.0, 2.0),
        ),
        Scenario(
            name="rolling-restart",
            number=14,
            fault=Fault.ROLLING_RESTART,
            action=_rolling_restart,
            checks="seed 000 §6 under an orderly broker roll: each of three nodes stopped "
            "cleanly and restarted, full ISR awaited between; strict - no duplicates at all, "
            "no FAILED, dead letter or refusal",
            own_broker=True,
            nodes=3,
            max_faults=1,
            duration_s=30.0,
            hold_s=(0.5, 1.5),
            strict=True,
            workload=_roll_workload,
        ),
        Scenario(
            name="cut-off",
            number=11,
            fault=Fault.CUT_OFF,
            action=_cut_off,
            checks="seed 000 §5-§6 and seed 001 'broker unavailable' seen from one client: host "
            "B cut off from the cluster for a minute (past session.timeout.ms and "
            "message.timeout.ms) by a TCP proxy, while A and the broker carry on",
            own_broker=True,
            broker=broker_with_cut_listener,
            rig=cut_rig,
            max_faults=1,
            first_s=(3.0, 5.0),
            hold_s=(60.0, 60.0),
        ),
        Scenario(
            name="logdir-unwritable",
            number=12,
            fault=Fault.LOGDIR_UNWRITABLE,
            action=_logdir_unwritable,
            checks="seed 001 'at-least-once' when a broker's disk fails: the log directory of "
            "the node leading a busy partition of B's inbox made immutable (chattr +i) until "
            "the node halts, then restored and restarted; three nodes, RF 3, min ISR 2",
            own_broker=True,
            nodes=3,
            max_faults=2,
            duration_s=40.0,
            hold_s=(20.0, 20.0),  # the bound on waiting for the halt
            gap_s=(1.0, 2.0),
        ),
        Scenario(
            name="store-full",
            number=13,
            fault=Fault.STORE_FULL,
            action=_store_full,
            rig=small_disk_rig,
            checks="seed 001 'the dedupe row in the effect's transaction' when the transaction "
            "cannot be written: host B's SQLite store on a small tmpfs filled to ENOSPC "
            "(SQLITE_FULL) for a while; no offset is committed past an unwritten hold",
            hold_s=(3.0, 8.0),
            gap_s=(2.0, 4.0),
        ),
        Scenario(
            name="clock-skew",
            number=16,
            fault=Fault.CLOCK_SKEW,
            action=_clock_skew,
            rig=skew_rig,
            checks="seed 000 envelope rules 'ts <= now + skew' and 'now <= expiresAt + skew': "
            "host B restarted with its wall clock off by 0.2-0.7x clock_skew_s "
            "(nothing may change), then 1.5-3x (refusals carry CLOCK_SKEW; nothing silent)",
            max_faults=2,
            duration_s=90.0,  # room for both faults: a skewed start took 11-17 s here
            hold_s=(8.0, 12.0),
            gap_s=(1.0, 2.0),
        ),
        Scenario(
            name="retention-gap",
            number=18,
            fault=Fault.RETENTION,
            action=_retention_gap,
            checks="seed 001 failure scenario 7 'a missing offset has a default' (never a "
            "silent skip): host B kill -9'd, the records it had not read deleted while it is "
            "down, restarted: B must stop with OFFSETS_LOST (exit 3, metric, log) until the "
            "group is reset; a deleted send counts as explained only if B reported it",
            own_broker=True,
            max_faults=1,
            first_s=(3.0, 5.0),
            hold_s=(3.0, 6.0),
        ),
    )
}
