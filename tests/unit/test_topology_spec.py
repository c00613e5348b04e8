"""The declared topology (R-TOP-1): names, compaction on the roster, caps on the DLQ."""

from __future__ import annotations

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec


def test_desired_topics_and_their_configs() -> None:
    spec = TopologySpec(hosts=("h2", "h1", "h1"), pools=("review",), topics=TopicNames(prefix="x."))
    by_name = {t.name: t for t in spec.desired()}
    assert sorted(by_name) == sorted([
        "x.roster", "x.jobs", "x.dlq", "x.inbox.h1", "x.control.h1", "x.inbox.h2", "x.control.h2",
        "x.pool.review",
    ])  # fmt: skip
    assert by_name["x.roster"].config["cleanup.policy"] == "compact"
    # the job ledger keeps every claim of a job (one key): compaction would drop all but one
    assert by_name["x.jobs"].config["cleanup.policy"] == "delete"
    dlq = by_name["x.dlq"].config
    assert dlq["cleanup.policy"] == "delete" and int(dlq["retention.bytes"]) > 0
    assert int(dlq["retention.ms"]) > 0
    assert by_name["x.inbox.h1"].partitions == 6
    assert "min.insync.replicas" not in by_name["x.inbox.h1"].config
    spec3 = TopologySpec(hosts=("h1",), replication=3, min_insync_replicas=2)
    assert all(t.config["min.insync.replicas"] == "2" for t in spec3.desired())


class _Topic:
    def __init__(self, partitions: int, rf: int) -> None:
        replicas = list(range(1, rf + 1))
        self.partitions = {p: type("P", (), {"replicas": replicas})() for p in range(partitions)}


class _Admin:
    """A cluster where every declared topic exists with replication factor ``rf``."""

    def __init__(self, spec: TopologySpec, rf: int) -> None:
        self.topics = {t.name: _Topic(t.partitions, rf) for t in spec.desired()}

    def list_topics(self, timeout: float) -> object:
        return type("Meta", (), {"topics": self.topics})()

    def describe_configs(self, resources: list[object]) -> dict[object, object]:
        return {}


def test_a_gateway_accepts_the_replication_the_cluster_gave_its_topics() -> None:
    """A gateway declares replication=None (the cluster's default.replication.factor)
    so it runs on three nodes with RF 3 topics; an explicit factor still refuses a mismatch."""
    from pipeline.errors import TopologyError
    from pipeline.kafka.topology import apply_topology

    gateway = TopologySpec(hosts=("h1",), replication=None)
    assert all(t.replication is None for t in gateway.desired())
    report = apply_topology("x", gateway, admin_factory=lambda _c: _Admin(gateway, 3))
    assert not report.created and not report.altered
    explicit = TopologySpec(hosts=("h1",), replication=1)
    try:
        apply_topology("x", explicit, admin_factory=lambda _c: _Admin(explicit, 3))
    except TopologyError as exc:
        assert "replication 3 != declared 1" in str(exc)
    else:
        raise AssertionError("an RF mismatch against an explicit factor must be refused")


class _Done:
    def __init__(self, error: int | None = None) -> None:
        self.error = error

    def result(self, timeout: float) -> None:
        from confluent_kafka import KafkaError, KafkaException

        if self.error is not None:
            raise KafkaException(KafkaError(self.error))


class _LaggingAdmin(_Admin):
    """The controller has h1's topics (2 partitions); the broker's metadata lists them only
    from the second read on, as right after another apply created them."""

    def __init__(self, made: TopologySpec) -> None:
        self.made = {t.name: _Topic(t.partitions, 1) for t in made.desired()}
        self.topics, self.reads, self.created = {}, 0, []  # type: ignore[var-annotated]

    def list_topics(self, timeout: float) -> object:
        self.reads += 1
        if self.reads >= 2:
            self.topics = self.made
        return super().list_topics(timeout)

    def create_topics(self, new: list[object], **kw: object) -> dict[str, _Done]:
        from confluent_kafka import KafkaError

        names = [t.topic for t in new]  # type: ignore[attr-defined]
        if not kw.get("validate_only"):
            self.created += names
        return {
            n: _Done(KafkaError.TOPIC_ALREADY_EXISTS if n in self.made else None) for n in names
        }


def test_a_mismatch_hidden_by_lagging_metadata_refuses_before_creating_anything() -> None:
    """CI 2026-12-04: a grown spec applied right after h1's topics were made with 2 partitions.
    The broker did not list them yet, so the apply created h9's topics, met h1's as raced and
    refused only then. The controller is asked first (validate-only): refused, nothing made."""
    import pytest

    from pipeline.errors import TopologyError
    from pipeline.kafka.topology import apply_topology

    topics = TopicNames(prefix="t.")
    admin = _LaggingAdmin(TopologySpec(hosts=("h1",), topics=topics, inbox_partitions=2))
    grown = TopologySpec(hosts=("h1", "h9"), topics=topics, inbox_partitions=4)
    with pytest.raises(TopologyError) as info:
        apply_topology("x", grown, admin_factory=lambda _c: admin)
    assert "t.inbox.h1: partitions 2 != declared 4" in str(info.value)
    assert admin.created == []
