"""Handing a relay batch to the producer: each row verbatim, its fold headers appended.

Per row: the stored headers, then the branch's fold headers (:class:`.headers.FoldHeaders`), one
``partial`` for its delivery report (a failed report carries no headers, so the row it belongs
to is known only from its own callback). A row of a stopped branch is held back; a row the
client refuses at once for good (``produce()`` raises: too large ...) stops its branch there, so
no later row of it in this batch is handed over (docs/outbox.md, "Permanent produce errors").
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pipeline.kafka.produce_errors import permanent_reason
from pipeline.record_headers import unpack_headers

from .batch import HELD_BACK, Batch
from .headers import TRACING, FoldHeaders

Branch = tuple[str, str]


def produce_batch(
    producer: Any, rows: list[Any], stopped: set[Branch], fold_headers: FoldHeaders
) -> Batch:
    """Produce ``rows`` (the relay's columns, :data:`.fetch.COLUMNS`); ``stopped`` gains each
    branch a row of which was refused for good."""
    produce = producer.produce
    batch = Batch(rows)
    report = batch.report
    for i, (_id, tenant, branch, lsn, topic, key, value, blob, _created) in enumerate(rows):
        if stopped and (tenant, branch) in stopped:
            report(i, HELD_BACK, None)
            continue
        headers = unpack_headers(blob) + fold_headers(tenant, branch, lsn)
        headers = TRACING.produced(topic, headers) if TRACING.on else headers
        try:
            produce(topic, value=value, key=key, headers=headers, on_delivery=partial(report, i))
        except BufferError:
            _produce_when_room(producer, batch, i, rows[i], headers, stopped)
        except Exception as exc:  # noqa: BLE001 - KafkaException and friends: a failure
            _refused_at_once(batch, i, tenant, branch, exc, stopped)
    producer.poll(0)
    return batch


def _produce_when_room(
    producer: Any, batch: Batch, i: int, row: Any, headers: Any, stopped: set[Branch]
) -> None:
    """The local queue is full: serve delivery reports until ``row`` fits."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(
                row[4],
                value=row[6],
                key=row[5],
                headers=headers,
                on_delivery=partial(batch.report, i),
            )
            return
        except BufferError:
            continue
        except Exception as exc:  # noqa: BLE001 - as in produce_batch
            _refused_at_once(batch, i, row[1], row[2], exc, stopped)
            return


def _refused_at_once(
    batch: Batch, i: int, tenant: str, branch: str, exc: Exception, stopped: set[Branch]
) -> None:
    batch.report(i, exc, None)
    if permanent_reason(exc) is not None:
        stopped.add((tenant, branch))  # hold the rest of the branch back now
