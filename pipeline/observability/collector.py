"""Prometheus view of the latest :class:`~pipeline.observability.sampler.LagSample`.

A custom collector: every scrape renders the cached sample, so scraping never calls the broker
and a slow scrape cannot pile up admin requests. Labels are ``group``/``topic``/``partition``
(bounded by the fleet's own topology, filtered by group prefix); never a msgId or gid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .sampler import LagSample

PER_PARTITION = ("group", "topic", "partition")

# name -> help; the single list docs/observability.md and the alert rules are checked against
METRICS: dict[str, str] = {
    "fleet_consumer_committed_offset": "Committed offset of the group on the partition.",
    "fleet_consumer_lag_messages": "Log-end offset minus committed offset (never negative).",
    "fleet_consumer_lag_seconds": "Age of the oldest unread record: now minus the timestamp of "
    "the record at the committed offset; 0 when caught up; never negative.",
    "fleet_consumer_retention_risk_ratio": "Share of the retention allowance the unread backlog "
    "uses: max(lag_seconds / retention.ms, lag / (log end - log start) once retention truncates); "
    "1 = next retention pass deletes unread records; >1 = it already did.",
    "fleet_consumer_lost_messages": "Records deleted by retention before the group read them "
    "(log start minus committed, floored at 0).",
    "fleet_consumer_retention_headroom_seconds": "retention.ms minus lag_seconds: time before the "
    "oldest unread record becomes eligible for deletion (only for topics with retention.ms).",
    "fleet_consumer_group_drain_seconds": "Time to drain the group's lag at the measured consume "
    "and arrival rates: lag / (consume rate - arrival rate); +Inf when consumption does not "
    "outpace arrivals; 0 when caught up (R-OBS-3: 210 / (45 - 30) = 14 s).",
    "fleet_consumer_group_consume_rate": "Records per second the group committed past, over "
    "the sampler's rate window.",
    "fleet_consumer_group_arrival_rate": "Records per second appended to the group's partitions, "
    "over the sampler's rate window.",
    "fleet_topic_log_end_offset": "Log-end offset (high watermark) of the partition.",
    "fleet_topic_log_start_offset": "Log-start offset (oldest retained) of the partition.",
    "fleet_dlq_depth_messages": "Records retained in the dead-letter topic (end - start, summed).",
    "fleet_dlq_oldest_age_seconds": "Age of the oldest record retained in the dead-letter topic "
    "(0 when empty; R-DLQ-3: alarm on DLQ depth and age).",
    "fleet_held_messages": "Messages in the gateways' held stores waiting to be drained.",
    "fleet_quarantined_keys": "Keys currently quarantined (parked behind a dead letter).",
    "fleet_outbox_backlog_rows": "Outbox rows not yet confirmed sent by the relay.",
    "fleet_outbox_oldest_unsent_age_seconds": "Age of the oldest unsent outbox row (0 if none).",
    "fleet_exporter_broker_up": "1 if the last sample cycle read the broker, else 0.",
    "fleet_exporter_sample_duration_seconds": "Wall time of the last sample cycle.",
    "fleet_exporter_last_sample_timestamp_seconds": "Unix time of the last sample cycle "
    "(sample age = time() - this; a constant per sample, so renderings can be cached).",
    "fleet_exporter_groups": "Consumer groups matched by the prefix in the last sample.",
    "fleet_exporter_samples_total": "Sample cycles run since start.",
}


def _gauge(name: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=list(labels))


class LagCollector(Collector):
    """Renders the sampler's cached sample (R-OBS-2: alert per partition, not on totals)."""

    def __init__(
        self,
        latest: Callable[[], LagSample | None],
        cycles: Callable[[], int],
    ) -> None:
        self._latest = latest
        self._cycles = cycles

    def register(self, registry: CollectorRegistry) -> LagCollector:
        registry.register(self)
        return self

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on the sample

    def collect(self) -> Iterator[Metric]:
        sample = self._latest()
        samples = CounterMetricFamily(
            "fleet_exporter_samples", METRICS["fleet_exporter_samples_total"]
        )
        samples.add_metric([], float(self._cycles()))
        yield samples
        if sample is None:
            return
        yield from self._per_partition(sample)
        yield from self._per_group(sample)
        yield from self._fleet(sample)

    def _per_group(self, sample: LagSample) -> Iterator[Metric]:
        drain = _gauge("fleet_consumer_group_drain_seconds", ("group",))
        consume = _gauge("fleet_consumer_group_consume_rate", ("group",))
        arrival = _gauge("fleet_consumer_group_arrival_rate", ("group",))
        for g in sample.drains:
            seconds = g.drain_seconds
            if seconds is not None:  # +Inf renders as such: "never drains"
                drain.add_metric([g.group], seconds)
            if g.consume_rate is not None and g.arrival_rate is not None:
                consume.add_metric([g.group], g.consume_rate)
                arrival.add_metric([g.group], g.arrival_rate)
        yield from (drain, consume, arrival)

    def _per_partition(self, sample: LagSample) -> Iterator[Metric]:
        fams = {
            n: _gauge(n, PER_PARTITION)
            for n in METRICS
            if n.startswith("fleet_consumer_") and not n.startswith("fleet_consumer_group_")
        }
        ends = _gauge("fleet_topic_log_end_offset", ("topic", "partition"))
        starts = _gauge("fleet_topic_log_start_offset", ("topic", "partition"))
        seen: set[tuple[str, int]] = set()
        for row in sample.partitions:
            labels = [row.group, row.topic, str(row.partition)]
            fams["fleet_consumer_committed_offset"].add_metric(labels, row.committed)
            fams["fleet_consumer_lag_messages"].add_metric(labels, row.lag_messages)
            fams["fleet_consumer_lag_seconds"].add_metric(labels, row.lag_seconds)
            fams["fleet_consumer_retention_risk_ratio"].add_metric(labels, row.retention_risk_ratio)
            fams["fleet_consumer_lost_messages"].add_metric(labels, row.lost_messages)
            headroom = row.retention_headroom_seconds
            if headroom is not None:
                fams["fleet_consumer_retention_headroom_seconds"].add_metric(labels, headroom)
            if (row.topic, row.partition) not in seen:
                seen.add((row.topic, row.partition))
                ends.add_metric([row.topic, str(row.partition)], row.log_end)
                starts.add_metric([row.topic, str(row.partition)], row.log_start)
        yield from fams.values()
        yield ends
        yield starts

    def _fleet(self, sample: LagSample) -> Iterator[Metric]:
        def one(name: str, value: float) -> GaugeMetricFamily:
            fam = _gauge(name)
            fam.add_metric([], value)
            return fam

        yield one("fleet_exporter_broker_up", 1.0 if sample.broker_ok else 0.0)
        yield one("fleet_exporter_sample_duration_seconds", sample.duration_s)
        yield one("fleet_exporter_last_sample_timestamp_seconds", sample.taken_at)
        yield one("fleet_exporter_groups", float(len(sample.groups)))
        if sample.dlq is not None:
            yield one("fleet_dlq_depth_messages", float(sample.dlq.messages))
            if sample.dlq.oldest_age_seconds is not None:
                yield one("fleet_dlq_oldest_age_seconds", sample.dlq.oldest_age_seconds)
        if sample.store is not None:
            yield one("fleet_held_messages", float(sample.store.held_messages))
            yield one("fleet_quarantined_keys", float(sample.store.quarantined_keys))
            yield one("fleet_outbox_backlog_rows", float(sample.store.outbox_backlog))
            yield one(
                "fleet_outbox_oldest_unsent_age_seconds", sample.store.oldest_unsent_age_seconds
            )
