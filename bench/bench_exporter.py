"""Exporter cost for a large fleet: 500 partitions x 20 groups, against one ListOffsets call.

``python -m bench exporter`` (``--quick``: 100 partitions x 5 groups). Uses ``KAFKA_BOOTSTRAP``
or starts a broker; creates uniquely named topics and groups and deletes them afterwards.

Figures (all medians, ratios to the baseline measured in the same run):

* ``baseline_list_offsets_s`` -- ONE ListOffsets(latest) call for every partition.
* ``warm_cycle`` -- a full sample cycle with cached timestamps (the steady state).
* ``cold_cycle`` -- the first cycle (timestamp fetch for every lagging partition, configs).
* ``small_fleet_cycle`` -- a warm cycle for 25 partitions x 1 group: flat cost means the big
  fleet's cycle is a small multiple of it, not 400x.
* ``naive_per_partition`` -- one ListOffsets call per partition (what a flat design avoids).
* ``render_once_per_sample`` -- prometheus-client rendering of the sample (sampler thread).
* ``http_scrape`` -- GET /metrics (gzip) on a running exporter: serving the cached rendering.
"""

from __future__ import annotations

import statistics
import time
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from prometheus_client import CollectorRegistry, generate_latest

from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.observability import (
    ExporterConfig,
    KafkaOffsetReader,
    LagCollector,
    LagSampler,
    SamplerConfig,
    build_exporter,
)
from pipeline.observability.exporter import RenderedMetrics
from pipeline.testing import start_test_broker

PARTITIONS_PER_TOPIC = 25


def _median(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _fleet(bootstrap: str, admin: AdminClient, prefix: str, topics: int, groups: int) -> list[str]:
    names = [f"{prefix}t{i}" for i in range(topics)]
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=PARTITIONS_PER_TOPIC, replication_factor=1) for n in names]
    )
    for f in futures.values():
        f.result(timeout=120)
    time.sleep(2)  # let leadership settle before producing
    producer = Producer(producer_config(bootstrap))
    for n in names:
        for p in range(PARTITIONS_PER_TOPIC):
            for _ in range(2):
                producer.produce(n, value=b"x", partition=p)
    assert producer.flush(120) == 0
    tps = [TopicPartition(n, p, 1) for n in names for p in range(PARTITIONS_PER_TOPIC)]
    for g in range(groups):  # every group committed at offset 1: lag 1 on every partition
        consumer = Consumer(consumer_config(bootstrap, f"{prefix}g{g}"))
        consumer.commit(offsets=tps, asynchronous=False)
        consumer.close()
    return names


def _measure(bootstrap: str, prefix: str, repeats: int) -> dict[str, Any]:
    reader = KafkaOffsetReader(bootstrap)
    sampler = LagSampler(reader, SamplerConfig(groups_prefix=prefix, dlq_topic=None))
    try:
        t0 = time.perf_counter()
        first = sampler.sample()
        cold = time.perf_counter() - t0
        assert first.broker_ok, first.errors
        before = dict(reader.calls)
        warm = _median(sampler.sample, repeats)
        per_cycle = {k: (reader.calls[k] - before.get(k, 0)) / repeats for k in reader.calls}
        registry = CollectorRegistry()
        LagCollector(lambda: sampler.latest, lambda: sampler.cycles).register(registry)
        rendered = RenderedMetrics(registry)
        render = _median(rendered.refresh, repeats)
        rows = len(first.partitions)
        size = len(generate_latest(registry))
    finally:
        reader.close()
    exporter = build_exporter(
        ExporterConfig(
            bootstrap=bootstrap,
            port=0,
            sampler=SamplerConfig(groups_prefix=prefix, dlq_topic=None, interval_s=3600),
        )
    )
    try:
        deadline = time.monotonic() + 120
        while exporter.sampler.cycles < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # the rendering follows the sample
        url = f"http://127.0.0.1:{exporter.port}/metrics"

        def scrape() -> bytes:
            req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return bytes(r.read())

        http = _median(scrape, repeats)
        gz = len(scrape())
    finally:
        exporter.stop()
    return {
        "cold": cold,
        "warm": warm,
        "render": render,
        "http_scrape": http,
        "rows": rows,
        "calls": per_cycle,
        "metrics_bytes": size,
        "metrics_gzip_bytes": gz,
    }


def main(quick: bool) -> dict[str, Any]:
    topics, groups = (4, 5) if quick else (20, 20)
    repeats = 3 if quick else 7
    broker = start_test_broker(nodes=1, name="bench")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    run = uuid.uuid4().hex[:8]
    big, small = f"bench.exporter.{run}.", f"bench.exporter-small.{run}."
    created: list[str] = []
    try:
        created += _fleet(broker.bootstrap, admin, big, topics, groups)
        created += _fleet(broker.bootstrap, admin, small, 1, 1)
        partitions = topics * PARTITIONS_PER_TOPIC
        spec = {
            TopicPartition(f"{big}t{i}", p): OffsetSpec.latest()
            for i in range(topics)
            for p in range(PARTITIONS_PER_TOPIC)
        }

        def one_call() -> None:
            for f in admin.list_offsets(spec, request_timeout=30).values():
                f.result(timeout=60)

        def per_partition() -> None:
            for tp, s in spec.items():
                for f in admin.list_offsets({tp: s}, request_timeout=30).values():
                    f.result(timeout=60)

        baseline = _median(one_call, repeats)
        naive = _median(per_partition, 1 if quick else 3)
        fleet = _measure(broker.bootstrap, big, repeats)
        tiny = _measure(broker.bootstrap, small, repeats)
        return {
            "fleet": f"{partitions} partitions x {groups} groups = {fleet['rows']} lag rows",
            "baseline_list_offsets_s": round(baseline, 5),
            "warm_cycle_s": round(fleet["warm"], 5),
            "warm_cycle_ratio_to_baseline": round(fleet["warm"] / baseline, 2),
            "cold_cycle_ratio_to_baseline": round(fleet["cold"] / baseline, 2),
            "render_once_per_sample_ratio_to_baseline": round(fleet["render"] / baseline, 2),
            "http_scrape_ratio_to_baseline": round(fleet["http_scrape"] / baseline, 3),
            "naive_per_partition_ratio_to_baseline": round(naive / baseline, 1),
            "big_vs_small_fleet_warm_cycle_ratio": round(fleet["warm"] / tiny["warm"], 2),
            "small_fleet": f"{PARTITIONS_PER_TOPIC} partitions x 1 group",
            "warm_cycle_us_per_lag_row": round(fleet["warm"] / fleet["rows"] * 1e6, 1),
            "broker_calls_per_warm_cycle": fleet["calls"],
            "metrics_bytes": fleet["metrics_bytes"],
            "metrics_gzip_bytes": fleet["metrics_gzip_bytes"],
        }
    finally:
        if created:
            for f in admin.delete_topics(created).values():
                f.result(timeout=120)
        gids = [f"{big}g{g}" for g in range(groups)] + [f"{small}g0"]
        for f in admin.delete_consumer_groups(gids).values():
            try:
                f.result(timeout=60)
            except Exception as exc:  # noqa: BLE001 - cleanup is best effort; report and go on
                print(f"could not delete group: {exc}")
        broker.close()
