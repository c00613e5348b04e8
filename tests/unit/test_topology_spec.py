"""The declared topology (DESIGN.md §1): names, compaction on the roster, caps on the DLQ."""

from __future__ import annotations

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec


def test_desired_topics_and_their_configs() -> None:
    spec = TopologySpec(hosts=("h2", "h1", "h1"), pools=("review",), topics=TopicNames(prefix="x."))
    by_name = {t.name: t for t in spec.desired()}
    assert sorted(by_name) == sorted([
        "x.roster", "x.dlq", "x.inbox.h1", "x.control.h1", "x.inbox.h2", "x.control.h2",
        "x.pool.review",
    ])  # fmt: skip
    assert by_name["x.roster"].config["cleanup.policy"] == "compact"
    dlq = by_name["x.dlq"].config
    assert dlq["cleanup.policy"] == "delete" and int(dlq["retention.bytes"]) > 0
    assert int(dlq["retention.ms"]) > 0
    assert by_name["x.inbox.h1"].partitions == 6
    assert "min.insync.replicas" not in by_name["x.inbox.h1"].config
    spec3 = TopologySpec(hosts=("h1",), replication=3, min_insync_replicas=2)
    assert all(t.config["min.insync.replicas"] == "2" for t in spec3.desired())
