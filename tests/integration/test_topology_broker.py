"""``apply_topology`` on a real broker (R-TOP-2: topology declared idempotently at boot,
refusing loudly on a partition-count mismatch, which would break key -> partition order)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.errors import TopologyError
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.testing import BrokerHandle, unique_name

pytestmark = pytest.mark.kafka


def configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [fut] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {k: e.value for k, e in fut.result(timeout=30).items()}


def eventually_config(bootstrap: str, topic: str, key: str, want: str = "1000000") -> str:
    # an altered config reaches every broker's metadata a moment after the alter returns
    deadline = time.monotonic() + 20
    value = configs(bootstrap, topic)[key]
    while value != want and time.monotonic() < deadline:
        time.sleep(0.2)
        value = configs(bootstrap, topic)[key]
    return value


def test_apply_creates_then_is_idempotent_and_fixes_config_drift(kafka: BrokerHandle) -> None:
    topics = TopicNames(prefix=unique_name("test.topo") + ".")
    spec = TopologySpec(hosts=("h1", "h2"), pools=("p",), topics=topics, inbox_partitions=3)
    first = apply_topology(kafka.bootstrap, spec)
    assert sorted(first.created) == sorted(t.name for t in spec.desired())
    meta = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=30)
    assert len(meta.topics[topics.inbox("h1")].partitions) == 3
    assert configs(kafka.bootstrap, topics.roster)["cleanup.policy"] == "compact"
    assert configs(kafka.bootstrap, topics.dlq)["retention.bytes"] == str(1 << 30)
    second = apply_topology(kafka.bootstrap, spec)
    assert not second.changed and len(second.unchanged) == len(spec.desired())
    capped = TopologySpec(hosts=("h1", "h2"), pools=("p",), topics=topics, inbox_partitions=3,
                          dlq_retention_bytes=1_000_000)  # fmt: skip
    third = apply_topology(kafka.bootstrap, capped)
    assert third.altered == {topics.dlq: {"retention.bytes": (str(1 << 30), "1000000")}}
    assert eventually_config(kafka.bootstrap, topics.dlq, "retention.bytes") == "1000000"
    assert not apply_topology(kafka.bootstrap, capped).changed


def test_partition_mismatch_is_refused_with_a_diff_and_nothing_changes(
    kafka: BrokerHandle,
) -> None:
    topics = TopicNames(prefix=unique_name("test.topo") + ".")
    apply_topology(kafka.bootstrap, TopologySpec(hosts=("h1",), topics=topics, inbox_partitions=2))
    grown = TopologySpec(hosts=("h1", "h9"), topics=topics, inbox_partitions=4)
    with pytest.raises(TopologyError) as info:
        apply_topology(kafka.bootstrap, grown)
    assert info.value.reason == "TOPOLOGY_MISMATCH"
    assert f"{topics.inbox('h1')}: partitions 2 != declared 4" in str(info.value)
    meta = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=30)
    assert topics.inbox("h9") not in meta.topics  # refused before creating anything
    assert len(meta.topics[topics.inbox("h1")].partitions) == 2


def test_cli_apply_json_and_mismatch_exit_code(kafka: BrokerHandle) -> None:
    prefix = unique_name("test.topocli") + "."
    runner = CliRunner()
    args = ["topics", "apply", "--host", "h1", "--prefix", prefix, "--bootstrap", kafka.bootstrap]
    res = runner.invoke(app, [*args, "--partitions", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["created"]) == 5  # roster, jobs, dlq, inbox.h1, control.h1
    again = runner.invoke(app, [*args, "--partitions", "2", "--json"])
    assert json.loads(again.stdout)["changed"] is False
    bad = runner.invoke(app, [*args, "--partitions", "5"])
    assert bad.exit_code == 1 and "TOPOLOGY_MISMATCH" in bad.output


def test_two_gateways_booting_at_once_both_apply_the_shared_topics(kafka: BrokerHandle) -> None:
    """Two hosts' gateways start together on a fresh cluster: both create the shared topics
    (roster, DLQ); the loser of that race must boot too, not fail on TOPIC_ALREADY_EXISTS."""
    import threading

    from pipeline.kafka.topics import TopicNames
    from pipeline.kafka.topology import TopologySpec, apply_topology

    for _ in range(3):  # a race is a matter of timing: try a few fresh prefixes
        topics = TopicNames(prefix=unique_name("test.race") + ".")
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def boot(
            host: str,
            topics: TopicNames = topics,
            errors: list = errors,
            start: threading.Barrier = start,
        ) -> None:
            start.wait()
            try:
                apply_topology(kafka.bootstrap, TopologySpec(hosts=(host,), topics=topics))
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(h,)) for h in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        wanted = {t.name for t in TopologySpec(hosts=("a", "b"), topics=topics).desired()}
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        deadline = time.monotonic() + 20  # metadata reaches every listener shortly after
        while time.monotonic() < deadline and not wanted <= set(
            admin.list_topics(timeout=10).topics
        ):
            time.sleep(0.2)
        assert wanted <= set(admin.list_topics(timeout=10).topics), "all declared topics exist"
