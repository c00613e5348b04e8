"""Every librdkafka setting the ack models depend on, set deliberately, in exactly one place.

librdkafka's defaults differ from the Java client's (``enable.idempotence=false``,
``auto.offset.reset=largest``, ``enable.auto.offset.store=true``, ``partitioner=consistent_random``);
nothing in this package relies on a default. ``docs/gateway.md`` explains each line.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .logs import LIBRDKAFKA_LOG
from .security import KafkaSecurity


class OffsetReset(enum.StrEnum):
    """What a group does with no valid committed offset. ``LATEST`` is never used for inboxes:
    a group that fell off retention must fail loudly (R-FAIL-7), not skip."""

    EARLIEST = "earliest"
    ERROR = "error"


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Idempotent producer, ``acks=all``: delivery reports play the part of publisher confirms."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,  # no duplicates from internal retries; implies acks=all
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,  # the idempotent maximum; order still kept
        "partitioner": "murmur2_random",  # same key -> same partition as the Java client
        "linger.ms": 2,
        "compression.type": "none",
        "message.timeout.ms": 30000,
        "logger": LIBRDKAFKA_LOG,  # de-duplicated: an outage must not flood the log
    }
    conf.update(overrides)
    return conf


def consumer_config(
    bootstrap: str,
    group_id: str,
    *,
    offset_reset: OffsetReset = OffsetReset.EARLIEST,
    instance_id: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Manual commits only, offsets stored by us, never ``latest``; optional static membership."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,  # we commit, and only when the ack model says so
        "enable.auto.offset.store": False,  # nothing is marked consumed behind our back
        "auto.offset.reset": offset_reset.value,
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 300000,
        "enable.partition.eof": False,
        "logger": LIBRDKAFKA_LOG,  # de-duplicated: an outage must not flood the log
    }
    if instance_id is not None:
        conf["group.instance.id"] = instance_id  # static membership: a second gateway is fenced
    conf.update(overrides)
    return conf


def pool_consumer_overrides(
    *, assignment: str, max_poll_interval_ms: int, session_timeout_ms: int, client_id: str
) -> dict[str, Any]:
    """A worker-pool member: the knobs the scaling experiments compare."""
    return {
        "client.id": client_id,  # the member's name in DescribeConsumerGroups (fleet pool status)
        # range | roundrobin | cooperative-sticky: eager strategies stop every partition on each
        # rebalance, cooperative-sticky moves only what must move (the lab compares them)
        "partition.assignment.strategy": assignment,
        # members keep polling while steps run (runtime/inflight.py), so this bounds a stuck
        # poll loop, not a slow step; the lab lowers it to show that
        "max.poll.interval.ms": max_poll_interval_ms,
        # how fast a kill -9'd member's partitions move; heartbeats stay at a third or less
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(100, min(1000, session_timeout_ms // 3)),
    }


def merged(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(base)
    if extra:
        out.update(extra)
    return out


def probe_consumer_config(bootstrap: str, group_id: str) -> dict[str, Any]:
    """A read-only consumer that peeks at one record per partition (the lag exporter reads the
    timestamp of the record at a group's committed offset). It only ever ``assign()``s and never
    commits, so its group id never appears on the broker. ``read_uncommitted``: an open
    transaction must not hide the record whose age we want."""
    conf = consumer_config(bootstrap, group_id)
    conf.update(
        {
            "isolation.level": "read_uncommitted",
            "fetch.wait.max.ms": 50,
            "max.partition.fetch.bytes": 65536,  # about one record's worth per partition
            "fetch.max.bytes": 4 * 1024 * 1024,
            # an end reached with no data record = only transaction markers left: report it
            "enable.partition.eof": True,
        }
    )
    return conf


def admin_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Admin client: topology checks at boot and from the CLI."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10000,
        "logger": LIBRDKAFKA_LOG,
    }
    conf.update(overrides)
    return conf


def with_security(conf: Mapping[str, Any], security: KafkaSecurity) -> dict[str, Any]:
    """``conf`` plus the ``[kafka]`` table's login, TLS files and pass-through properties: the
    one function every client, producer, consumer and admin alike, goes through (the
    :class:`~pipeline.bootstrap.Factories`). Owned keys cannot be overridden here (the table
    refuses them), so the ack model's settings above always win. Never log the result: it holds
    the password."""
    out = dict(conf)
    out.update(security.client_properties())
    return out
