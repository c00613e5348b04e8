"""On a real broker: offsets agree with independent clients, retention risk
is flagged before deletion, and a real Prometheus fires and clears the shipped lag alert."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.kafka.local.ports import free_ports
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.observability import (
    ExporterConfig,
    KafkaOffsetReader,
    LagSampler,
    LagStatus,
    SamplerConfig,
    Thresholds,
    build_exporter,
)
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.conftest import kcat_refusal

from .lag_helpers import (
    CommittingConsumer,
    PrometheusServer,
    SteadyProducer,
    java_lag_probe,
    kcat_offsets,
    kcat_read_one,
    shipped_rules_with_short_for,
)

pytestmark = pytest.mark.kafka


def produce(
    bootstrap: str, topic: str, per_partition: dict[int, int]
) -> dict[tuple[int, int], int]:
    """Produce to explicit partitions; returns (partition, offset) -> record timestamp (ms)."""
    producer = Producer(producer_config(bootstrap))
    stamps: dict[tuple[int, int], int] = {}

    def report(err: object, msg: object) -> None:
        assert err is None, err
        stamps[(msg.partition(), msg.offset())] = msg.timestamp()[1]  # type: ignore[attr-defined]

    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, value=f"v{i}".encode(), partition=partition, on_delivery=report)
    assert producer.flush(30) == 0
    return stamps


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer(consumer_config(bootstrap, group))
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def delete_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for f in futures.values():
        f.result(timeout=30)


def test_offsets_and_lag_agree_with_java_admin_client_and_kcat(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    topic = new_topic("lag", partitions=3)
    dlq = new_topic("dlq")
    stamps = produce(kafka.bootstrap, topic, {0: 20, 1: 20, 2: 20})
    dlq_stamps = produce(kafka.bootstrap, dlq, {0: 3})
    delete_before(kafka.bootstrap, topic, 2, 4)  # a non-zero log start to compare too
    delete_before(kafka.bootstrap, dlq, 0, 1)  # the DLQ's oldest retained record is offset 1
    commit(
        kafka.bootstrap,
        group_id,
        [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 20), TopicPartition(topic, 2, 12)],
    )
    reader = KafkaOffsetReader(kafka.bootstrap)
    try:
        before = time.time()
        sample = LagSampler(reader, SamplerConfig(groups_prefix=group_id, dlq_topic=dlq)).sample()
        after = time.time()
    finally:
        reader.close()
    assert sample.broker_ok, sample.errors
    ours = [
        (r.topic, r.partition, r.committed, r.log_start, r.log_end, r.lag_messages)
        for r in sample.partitions
    ]
    assert ours == [
        (topic, 0, 5, 0, 20, 15),
        (topic, 1, 20, 0, 20, 0),
        (topic, 2, 12, 4, 20, 8),
    ]
    # independent: the Java Admin client (what kafka-consumer-groups --describe uses) ...
    assert java_lag_probe(kafka.bootstrap, group_id) == ours
    # ... and kcat (librdkafka, separate process) for the log end and start offsets, unless
    # it cannot log in to a cluster the suite did not start (tests/conftest.py says why)
    if kcat_refusal() is None:
        assert kcat_offsets(kafka.bootstrap, topic, 3, -1) == {r[1]: r[4] for r in ours}
        assert kcat_offsets(kafka.bootstrap, topic, 3, -2) == {r[1]: r[3] for r in ours}
    by_part = {r.partition: r for r in sample.partitions}
    # lag seconds = now - timestamp of the record at the committed offset; idle caught-up = 0
    assert by_part[1].lag_seconds == 0.0
    for part, offset in ((0, 5), (2, 12)):
        ts = stamps[(part, offset)] / 1000.0
        assert before - ts - 0.001 <= by_part[part].lag_seconds <= after - ts + 0.001
    assert sample.dlq is not None and sample.dlq.messages == 2
    # R-DLQ-3: DLQ depth AND age -- the age of the oldest retained dead letter (offset 1)
    oldest = dlq_stamps[(0, 1)] / 1000.0
    assert sample.dlq.oldest_age_seconds is not None
    assert before - oldest - 0.001 <= sample.dlq.oldest_age_seconds <= after - oldest + 0.001


@pytest.mark.kcat
def test_retention_risk_flagged_before_unread_records_are_deleted(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    """R-OBS-4, R-FAIL-7: a group down longer than retention silently skips; the
    exporter warns *before* lag reaches retention, and a group whose offset fell off is LOST."""
    topic = new_topic("retention")
    produce(kafka.bootstrap, topic, {0: 100})
    commit(kafka.bootstrap, group_id, [TopicPartition(topic, 0, 10)])
    delete_before(kafka.bootstrap, topic, 0, 5)  # retention starts truncating the front
    runner = CliRunner()
    env = {"KAFKA_BOOTSTRAP": kafka.bootstrap}

    result = runner.invoke(app, ["lag", "--groups-prefix", group_id, "--json"], env=env)
    report = json.loads(result.stdout)
    (row,) = report["partitions"]
    assert result.exit_code == 1  # AT_RISK and LOST exit non-zero, for cron/CI checks
    assert row["status"] == LagStatus.AT_RISK and row["lost"] == 0
    assert row["retention_risk"] >= Thresholds().retention_risk
    # flagged while the group's next record still exists
    assert kcat_read_one(kafka.bootstrap, topic, 0, 10) == "10"

    delete_before(kafka.bootstrap, topic, 0, 50)  # retention overtakes the group
    result = runner.invoke(app, ["lag", "--groups-prefix", group_id, "--json"], env=env)
    (row,) = json.loads(result.stdout)["partitions"]
    assert result.exit_code == 1
    assert row["status"] == LagStatus.LOST and row["lost"] == 40
    assert row["retention_risk"] > 1.0

    table = runner.invoke(app, ["lag", "--groups-prefix", group_id], env=env, terminal_width=200)
    assert "LOST" in table.stdout and "LAG-SECONDS" in table.stdout


@pytest.mark.slow
def test_real_prometheus_fires_lag_alert_when_consumer_stops_and_clears_on_restart(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    """R-OBS-2: slowness shows up as lag -- alert on its trend. The shipped rule, scraped and
    evaluated by a real Prometheus, fires for a stopped consumer and clears once it catches up."""
    topic = new_topic("alert", partitions=2)
    exporter = build_exporter(
        ExporterConfig(
            bootstrap=kafka.bootstrap,
            port=free_ports(1)[0],
            sampler=SamplerConfig(groups_prefix=group_id, dlq_topic=None, interval_s=0.5),
        )
    )
    prom = consumer = producer = None
    try:
        prom = PrometheusServer(
            scrape_target=f"127.0.0.1:{exporter.port}", rules=shipped_rules_with_short_for(3)
        )
        produce(kafka.bootstrap, topic, {0: 10, 1: 10})
        consumer = CommittingConsumer(kafka.bootstrap, group_id, topic).start()

        def scraped_lag() -> list[float]:
            data = prom.api(
                f"query?query=fleet:consumer_lag_messages:sum{{group=%22{group_id}%22}}"
            )
            return [float(r["value"][1]) for r in data["result"]]

        wait_until(
            lambda: scraped_lag() == [0.0],
            timeout_s=90,
            what="caught up, as Prometheus sees it",
            interval_s=0.3,
        )
        wait_until(
            lambda: not prom.alerts("FleetConsumerLagGrowing", group=group_id),
            timeout_s=30,
            what="no lag alert while caught up",
            interval_s=0.3,
        )

        consumer.stop()  # the consumer dies; producers go on
        producer = SteadyProducer(kafka.bootstrap, topic, rate=20).start()
        firing = wait_until(
            lambda: [
                a
                for a in prom.alerts("FleetConsumerLagGrowing", group=group_id)
                if a["state"] == "firing"
            ],
            timeout_s=120,
            what="FleetConsumerLagGrowing firing",
            interval_s=0.3,
        )
        assert firing[0]["labels"]["topic"] == topic
        assert firing[0]["labels"]["severity"] == "warning"

        producer.stop()
        consumer = CommittingConsumer(kafka.bootstrap, group_id, topic).start()
        wait_until(
            lambda: not prom.alerts("FleetConsumerLagGrowing", group=group_id),
            timeout_s=120,
            what="alert cleared after restart",
            interval_s=0.3,
        )
        assert scraped_lag() == [0.0]
        assert consumer.consumed >= producer.sent
    finally:
        for part in (producer, consumer, prom):
            if part is not None:
                part.stop()
        exporter.stop()


def test_fleet_exporter_command_serves_lag_and_stops_on_sigterm(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    topic = new_topic("cli")
    produce(kafka.bootstrap, topic, {0: 7})
    commit(kafka.bootstrap, group_id, [TopicPartition(topic, 0, 3)])
    port = free_ports(1)[0]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline",
            "exporter",
            "--metrics-port",
            str(port),
            "--metrics-address",
            "127.0.0.1",
            "--groups-prefix",
            group_id,
            "--interval",
            "0.5",
            "--dlq-topic",
            "",
        ],
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    want = f'fleet_consumer_lag_messages{{group="{group_id}",partition="0",topic="{topic}"}} 4.0'

    def metrics() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            return ""

    try:
        text = wait_until(
            lambda: want in metrics() and metrics(),
            timeout_s=60,
            what="exporter serves the group's lag",
            interval_s=0.3,
        )
        assert "fleet_exporter_broker_up 1.0" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out


def test_group_parked_before_a_commit_marker_reads_zero_seconds(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    """The "absurd time lag" of other exporters: after a transaction, a group committed at the
    commit marker shows LAG 1 forever (as kafka-consumer-groups does) though nothing is waiting.
    Our time lag stays 0 instead of growing with the wall clock."""
    from pipeline.testing import unique_name

    topic = new_topic("txn")
    producer = Producer(
        producer_config(kafka.bootstrap, **{"transactional.id": unique_name("test.txn")})
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"t{i}".encode(), partition=0)
    producer.commit_transaction(30)
    commit(kafka.bootstrap, group_id, [TopicPartition(topic, 0, 5)])  # after the last record
    reader = KafkaOffsetReader(kafka.bootstrap)
    try:
        sampler = LagSampler(reader, SamplerConfig(groups_prefix=group_id, dlq_topic=None))
        sampler.sample()
        time.sleep(1.5)  # a wall-clock fallback would now read >= 1.5 s
        (row,) = sampler.sample().partitions
    finally:
        reader.close()
    assert (row.committed, row.log_end, row.lag_messages) == (5, 6, 1)  # the marker at 5
    assert row.lag_seconds == 0.0


def test_compacted_topic_has_no_time_based_retention_risk(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    """fleet.roster is compact-only: its retention.ms deletes nothing, so a slow roster reader
    is LAGGING, never AT_RISK by time; a delete-policy topic reports its retention.ms."""
    compacted = new_topic("compact", config={"cleanup.policy": "compact", "retention.ms": "1000"})
    deleting = new_topic("delete", config={"retention.ms": "3600000"})
    for topic in (compacted, deleting):
        producer = Producer(producer_config(kafka.bootstrap))
        for i in range(4):
            producer.produce(topic, key=f"k{i}".encode(), value=b"v", partition=0)
        assert producer.flush(30) == 0
    commit(
        kafka.bootstrap, group_id, [TopicPartition(compacted, 0, 0), TopicPartition(deleting, 0, 0)]
    )
    time.sleep(1.2)  # the compacted topic's records are now older than its (ignored) retention.ms
    reader = KafkaOffsetReader(kafka.bootstrap)
    try:
        sample = LagSampler(reader, SamplerConfig(groups_prefix=group_id, dlq_topic=None)).sample()
    finally:
        reader.close()
    rows = {r.topic: r for r in sample.partitions}
    assert rows[compacted].retention_ms is None
    assert rows[compacted].retention_headroom_seconds is None
    assert rows[compacted].status(Thresholds()) is LagStatus.LAGGING
    assert rows[deleting].retention_ms == 3_600_000


def test_fleet_lag_says_never_for_a_stopped_group_and_zero_when_caught_up(
    kafka: BrokerHandle, new_topic, group_id
) -> None:
    """R-OBS-3: a lag drains at (consume - arrival) per second; a stopped group consumes
    nothing, so its lag "never" drains, while a caught-up group has nothing to drain."""
    topic = new_topic("drain", partitions=2)
    produce(kafka.bootstrap, topic, {0: 10, 1: 10})
    commit(kafka.bootstrap, group_id, [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)])
    commit(
        kafka.bootstrap,
        group_id + ".done",
        [TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 10)],
    )
    env = {"KAFKA_BOOTSTRAP": kafka.bootstrap}
    args = ["lag", "--groups-prefix", group_id, "--window", "1", "--json"]
    result = CliRunner().invoke(app, args, env=env)
    groups = {g["group"]: g for g in json.loads(result.stdout)["groups"]}
    assert groups[group_id]["lag"] == 6
    assert groups[group_id]["consume_rate"] == 0.0
    assert groups[group_id]["drain_seconds"] == "never"
    assert groups[group_id + ".done"]["drain_seconds"] == 0.0
    table = CliRunner().invoke(app, args[:-1], env=env, terminal_width=200)
    assert "GROUP-DRAIN-S" in table.stdout and "never" in table.stdout
