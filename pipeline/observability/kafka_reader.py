"""The :class:`~pipeline.observability.ports.OffsetReader` on a real broker (confluent-kafka).

Calls per sample cycle, whatever the fleet's size: one ListGroups; one OffsetFetch per group
(librdkafka's ListConsumerGroupOffsets takes one group per request, so they are all issued at
once and awaited together); one ListOffsets(latest) and one ListOffsets(earliest) covering every
partition; one Fetch round for the timestamps of lagging partitions whose committed offset moved
since the last cycle; DescribeConfigs only when a new topic appears (cached).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # runtime re-exports
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from pipeline.errors import BrokerError
from pipeline.kafka.clients import ClientFactory, new_admin, new_consumer
from pipeline.kafka.settings import admin_config, probe_consumer_config

from .ports import TopicPartitionKey

log = logging.getLogger(__name__)


def _wait(futures: Mapping[Any, Future[Any]], timeout: float) -> tuple[dict[Any, Any], list[str]]:
    """Resolve every future; per-key errors are collected, not raised (one bad topic must
    not blank the whole fleet's lag)."""
    done: dict[Any, Any] = {}
    errors: list[str] = []
    for key, fut in futures.items():
        try:
            done[key] = fut.result(timeout=timeout)
        except KafkaException as exc:
            errors.append(f"{key}: {exc}")
        except TimeoutError:
            errors.append(f"{key}: timed out after {timeout}s")
    return done, errors


class KafkaOffsetReader:
    """Admin-API reader; counts its broker calls per kind so the flat-cost claim is checkable."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 10.0,
        fetch_budget_s: float = 2.0,
        admin_factory: ClientFactory = new_admin,
        consumer_factory: ClientFactory = new_consumer,
    ) -> None:
        self._bootstrap = bootstrap
        self._timeout = timeout_s
        self._fetch_budget = fetch_budget_s
        self._new_consumer = consumer_factory
        self._admin = admin_factory(admin_config(bootstrap))
        self._probe: Any = None
        self.calls: dict[str, int] = {}

    def _count(self, kind: str, n: int = 1) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + n

    def _all_failed(self, what: str, errors: list[str], total: int) -> None:
        if errors and len(errors) < total:  # partial: keep the rest, but say so
            log.warning("%s failed for %d of %d: %s", what, len(errors), total, errors[:3])
        if total and len(errors) == total:
            raise BrokerError(
                f"{what} failed for all {total} requests: {errors[0]}",
                context={"errors": errors[:5]},
            )

    def list_groups(self, prefix: str) -> list[str]:
        self._count("list_consumer_groups")
        try:
            result = self._admin.list_consumer_groups(request_timeout=self._timeout).result(
                timeout=self._timeout + 5
            )
        except (KafkaException, TimeoutError) as exc:
            raise BrokerError(f"listing consumer groups failed: {exc}") from exc
        return sorted(g.group_id for g in result.valid if g.group_id.startswith(prefix))

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[TopicPartitionKey, int]]:
        groups = list(groups)
        if not groups:
            return {}
        futures: dict[str, Future[Any]] = {}
        for g in groups:
            futures.update(
                self._admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(g)], request_timeout=self._timeout
                )
            )
        self._count("list_consumer_group_offsets", len(groups))
        done, errors = _wait(futures, self._timeout + 5)
        self._all_failed("reading committed offsets", errors, len(futures))
        out: dict[str, dict[TopicPartitionKey, int]] = {}
        for g, res in done.items():
            out[g] = {
                (tp.topic, tp.partition): tp.offset
                for tp in res.topic_partitions or []
                if tp.error is None and tp.offset >= 0  # -1001: no commit on that partition
            }
        return out

    def watermarks(
        self, partitions: Iterable[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, tuple[int, int]]:
        keys = sorted(set(partitions))
        if not keys:
            return {}
        ends = self._list_offsets(keys, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        starts = self._list_offsets(keys, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        return {k: (starts[k], ends[k]) for k in keys if k in starts and k in ends}

    def _list_offsets(
        self, keys: list[TopicPartitionKey], spec: OffsetSpec
    ) -> dict[TopicPartitionKey, int]:
        request = {TopicPartition(t, p): spec for t, p in keys}
        self._count("list_offsets")
        futures = self._admin.list_offsets(request, request_timeout=self._timeout)
        done, errors = _wait(futures, self._timeout + 5)
        self._all_failed("listing offsets", errors, len(futures))
        return {(tp.topic, tp.partition): info.offset for tp, info in done.items()}

    def record_timestamps(
        self, positions: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int | None]:
        if not positions:
            return {}
        probe = self._probe_consumer()
        self._count("fetch_round")
        wanted = dict(positions)
        probe.assign([TopicPartition(t, p, off) for (t, p), off in wanted.items()])
        found: dict[TopicPartitionKey, int | None] = {}
        no_timestamp: set[TopicPartitionKey] = set()  # read, but the record carries no time
        deadline = time.monotonic() + self._fetch_budget
        try:
            while len(found) + len(no_timestamp) < len(wanted) and time.monotonic() < deadline:
                for msg in probe.consume(num_messages=500, timeout=0.2):
                    topic, part, offset = msg.topic(), msg.partition(), msg.offset()
                    if topic is None or part is None or (topic, part) not in wanted:
                        continue
                    key = (topic, part)
                    err = msg.error()
                    if key in found or key in no_timestamp:
                        continue
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            found[key] = None  # end reached, no data record: markers only
                        continue
                    if offset is None or offset < wanted[key]:
                        continue
                    _, ts = msg.timestamp()
                    if ts is not None and ts > 0:
                        found[key] = ts
                    else:  # left out: the sampler falls back to its first-seen lower bound
                        no_timestamp.add(key)
                    probe.pause([TopicPartition(topic, part)])  # one record is enough
        finally:
            # pause state outlives unassign in librdkafka: resume so the next round reads again
            probe.resume([TopicPartition(t, p) for t, p in wanted])
            probe.unassign()
        return found

    def _probe_consumer(self) -> Any:
        if self._probe is None:
            # assign() only, never subscribe or commit: this group id never shows on the broker.
            self._probe = self._new_consumer(
                probe_consumer_config(
                    self._bootstrap, f"_fleet-exporter-probe.{uuid.uuid4().hex[:8]}"
                )
            )
        return self._probe

    def retention_ms(self, topics: Iterable[str]) -> dict[str, int | None]:
        names = sorted(set(topics))
        if not names:
            return {}
        self._count("describe_configs")
        futures = self._admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t) for t in names], request_timeout=self._timeout
        )
        done, _errors = _wait(futures, self._timeout + 5)
        out: dict[str, int | None] = {}
        for resource, entries in done.items():
            policy = entries.get("cleanup.policy")
            if policy is not None and "delete" not in str(policy.value):
                out[resource.name] = None  # compact-only: retention.ms deletes nothing
                continue
            entry = entries.get("retention.ms")
            value = int(entry.value) if entry is not None and entry.value is not None else -1
            out[resource.name] = None if value < 0 else value
        return out

    def partitions_of(self, topic: str) -> list[int]:
        self._count("metadata")
        try:
            md = self._admin.list_topics(topic=topic, timeout=self._timeout)
        except KafkaException as exc:
            raise BrokerError(f"metadata for {topic} failed: {exc}") from exc
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            return []
        return sorted(tmd.partitions)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
