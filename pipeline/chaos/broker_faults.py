"""Faults of the brokers themselves (leader-kill9, paused-leader, logdir-unwritable,
rolling-restart), on three KRaft nodes (RF 3, min ISR 2): the leader of a busy partition
killed, paused, or its log directory made unwritable, and an orderly roll of every node. Each
heal waits for the full ISR (:mod:`.own_cluster`). How each is made here is in ``docs/chaos.md``.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from typing import Any

from .history import HistoryWriter
from .nemesis import NemesisContext
from .own_cluster import ISR_BOUND_S, back_in_sync, hot_partition, own_cluster, restart_node
from .workload import Workload
from .workload_config import WorkloadConfig

BROKER_SESSION_S = 9.0  # KRaft broker.session.timeout.ms: the controller fences a silent broker


def leader_kill9(ctx: NemesisContext, down: float) -> tuple[str, dict[str, Any]]:
    cluster, topic = own_cluster(ctx), ctx.workload.topics.inbox("B")
    partition = hot_partition(ctx, topic)
    leader = cluster.leader_of(topic, partition)
    cluster.kill(leader)
    time.sleep(down)
    detail = {"topic": topic, "partition": partition, "down_s": round(down, 3)}
    return f"node-{leader}", {**detail, **restart_node(ctx, leader)}


def leader_pause(ctx: NemesisContext, stopped: float) -> tuple[str, dict[str, Any]]:
    cluster, topic = own_cluster(ctx), ctx.workload.topics.inbox("B")
    partition = hot_partition(ctx, topic)
    leader = cluster.leader_of(topic, partition)
    cluster.pause(leader)
    time.sleep(stopped)
    cluster.resume(leader)
    detail = {"topic": topic, "partition": partition, "stopped_s": round(stopped, 3)}
    return f"node-{leader}", {**detail, **back_in_sync(ctx, leader)}


# The roll's bound: each node answering (ISR_BOUND_S) and its ISR full again (ISR_BOUND_S).
ROLL_BOUND_S = 3 * 2 * ISR_BOUND_S


def roll_workload(cfg: WorkloadConfig, history: HistoryWriter) -> Workload:
    """The workload with ASKs that outlive a whole roll and the drain after it. The asker reads
    its ANSWERs at the end: with the default 60 s an ANSWER held on time at its gateway, but
    undrained when a slow roll ran past its ``expiresAt``, was swept ``EXPIRED`` -- a dead letter,
    so a finding of a strict scenario that the fleet did not cause."""
    return Workload(
        replace(cfg, ask_ttl_s=ROLL_BOUND_S + cfg.duration_s + cfg.drain_timeout_s), history
    )


def rolling_restart(ctx: NemesisContext, pause: float) -> tuple[str, dict[str, Any]]:
    """One roll: each node in turn stopped cleanly (SIGTERM: controlled shutdown moves its
    leaders away first), started on its data, and the full ISR awaited before the next."""
    cluster = own_cluster(ctx)
    steps = []
    for node in cluster.nodes:
        steps.append({"node": node.spec.node_id, **restart_node(ctx, node.spec.node_id)})
        time.sleep(pause)
    return "all nodes", {"steps": steps}


def logdir_unwritable(ctx: NemesisContext, bound: float) -> tuple[str, dict[str, Any]]:
    """``chattr +i`` on a leader's log directory. As root, ``chmod`` stops nothing
    (CAP_DAC_OVERRIDE); an immutable directory refuses new files and renames even to root,
    which is what the broker's checkpoint writes (``*.tmp`` then rename) need, so the broker
    meets the failure on its own schedule: the log dir goes offline and, being its only one,
    the broker halts. Heal: ``chattr -i`` and restart the node on its data."""
    cluster, topic = own_cluster(ctx), ctx.workload.topics.inbox("B")
    partition = hot_partition(ctx, topic)
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
    return f"node-{leader}", {**detail, **restart_node(ctx, leader)}
