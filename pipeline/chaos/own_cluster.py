"""The scenario's own brokers, as a fault sees them: the cluster, a busy partition to aim at,
and the bounded waits a heal ends with (a node answering, every partition's ISR full again).

A heal waits until every partition of the run's topics has its full ISR, so the next fault
starts from a healthy cluster and "five leader kills" means five, not a pile-up that loses
quorum.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.kafka.local import LocalCluster
from pipeline.kafka.local.probe import node_answers

from .nemesis import NemesisContext

ISR_BOUND_S = 90.0


def own_cluster(ctx: NemesisContext) -> LocalCluster:
    assert ctx.cluster is not None, "a broker fault needs the scenario's own brokers"
    return ctx.cluster


def hot_partition(ctx: NemesisContext, topic: str) -> int:
    """A partition of ``topic`` that carries the stream (it has records), drawn by ``ctx.rng``."""
    cluster = own_cluster(ctx)
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


def back_in_sync(ctx: NemesisContext, node_id: int) -> dict[str, Any]:
    """The node answers again, then every partition of the run has its full ISR."""
    cluster = own_cluster(ctx)
    answered = wait_node(cluster, node_id)
    return {"answered_s": answered, "isr_s": wait_full_isr(cluster, ctx.workload.prefix)}


def restart_node(ctx: NemesisContext, node_id: int) -> dict[str, Any]:
    cluster = own_cluster(ctx)
    cluster.restart(node_id, wait=False)  # stop (a no-op on a dead node), start on its data
    return back_in_sync(ctx, node_id)
