"""Taking records off the consumer: no linger at low rates, fair across partitions in a pool.

A consume error that says offsets were lost or the member is fenced is raised here; any other
is logged (librdkafka retries it).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError

from pipeline.errors import FencedError

from .config import RuntimeConfig
from .inflight import Dispatcher
from .offsets import raise_if_offsets_lost

log = logging.getLogger(__name__)


def fetch(
    consumer: Any,
    config: RuntimeConfig,
    inflight: Dispatcher | None,
    room: int | None = None,
    wait_s: float | None = None,
) -> list[Any]:
    """Whatever is buffered now, else block for the FIRST record only.

    ``consume(n, timeout)`` waits until ``n`` records or the timeout, which adds up to the
    timeout to every record's latency at low rates; this never waits once one has arrived.
    """
    batch = config.batch_size if room is None else max(1, min(room, config.batch_size))
    if inflight is not None:
        return _fetch_each(consumer, config, inflight, batch, wait_s)
    messages: list[Any] = consumer.consume(batch, 0)
    if messages:
        return messages
    first = consumer.poll(config.poll_timeout_s if wait_s is None else wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(batch - 1, 0)]


def _fetch_each(
    consumer: Any,
    config: RuntimeConfig,
    inflight: Dispatcher,
    batch: int,
    wait_s: float | None,
) -> list[Any]:
    """inflight: ``fetch`` one record at a time, so the dispatcher pauses a partition the
    moment it has its buffer's worth (``Dispatcher.fetched``) and the rest of the batch
    comes from other partitions: one ``consume(batch)`` would hand out a backlog a
    partition at a time."""
    wait = config.poll_timeout_s if wait_s is None else wait_s
    out: list[Any] = []
    while len(out) < batch:
        got: list[Any] = consumer.consume(1, 0)
        if not got and not out:  # block for the first record only
            first = consumer.poll(wait)
            got = [] if first is None else [first]
        if not got:
            break
        out.extend(got)
        inflight.fetched(consumer, got[0])
    return out


def on_consume_error(consumer: Any, config: RuntimeConfig, err: KafkaError, msg: Any) -> None:
    # R-FAIL-7: names group, partition, committed offset and how many were lost
    raise_if_offsets_lost(consumer, msg, config.group_id)
    if err.fatal() or err.code() == KafkaError._FATAL:
        # librdkafka reports static-membership fencing (a second member with our
        # group.instance.id) as _FATAL on the consume path; the client is unusable now.
        raise FencedError(
            f"group {config.group_id} member {config.instance_id or '(dynamic)'} "
            f"is fenced or failed fatally: {err.str()}"
        )
    log.warning("consume error (librdkafka retries it): %s", err.str())
