"""The lab's load generator: one process producing a scenario's events at their wall times.

It writes what it managed to a stats file, because a producer that falls behind the arrival
rate means the *machine* decides the result, not the model (the report says so): ``late_p99_s``
is how far behind schedule sends were, ``produced_rate`` what it achieved.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pipeline.kafka.clients import ClientFactory, new_producer
from pipeline.kafka.settings import producer_config

from .arrivals import events
from .scenario import Scenario


def produce(
    s: Scenario,
    *,
    bootstrap: str,
    topic: str,
    start_at: float,
    stats: Path,
    producer_factory: ClientFactory = new_producer,
) -> dict[str, Any]:
    """At ``start_at`` the prefill (flushed: the backlog is in the log at t = 0, as the model
    has it), then every event at ``start_at + wall(t)``; returns (and writes) the stats.

    The prefill used to go out as soon as the process had started, about when ``start_at``
    came: under load its imports ran past it, the backlog landed up to a second late, and the
    events due meanwhile were sent in a burst behind it -- a drain 3 x that delay too long
    (lag_drain: 30/s piling up while nothing drains at 15/s net)."""
    producer = producer_factory(producer_config(bootstrap, **{"linger.ms": 5}))
    late: list[float] = []
    sent = prefilled = 0
    began = None
    prefill_late_s = None
    all_events = list(events(s))
    backlog = [ev for ev in all_events if ev.prefill]
    if backlog:
        wait = start_at - time.time()
        if wait > 0:
            time.sleep(wait)
    for ev in backlog:
        producer.produce(
            topic,
            value=ev.payload(),
            key=f"k{ev.key}".encode(),
            partition=ev.partition,
            headers=[("msgId", f"lab-{ev.seq}".encode())],
        )
        producer.poll(0)
        prefilled += 1
        if prefilled % 1000 == 0:
            producer.flush(10)
    if backlog:
        producer.flush(30)
        prefill_late_s = time.time() - start_at  # in the log this long after t = 0 (wall s)
    for ev in all_events:
        if ev.prefill:
            continue
        headers: list[tuple[str, str | bytes | None]] = [("msgId", f"lab-{ev.seq}".encode())]
        due = start_at + s.wall(ev.t)
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        else:
            late.append(-wait)
        began = began or time.time()
        producer.produce(
            topic,
            value=ev.payload(),
            key=f"k{ev.key}".encode(),
            partition=ev.partition,
            headers=headers,
        )
        producer.poll(0)
        sent += 1
    producer.flush(30)
    elapsed = max(1e-9, time.time() - (began or time.time()))
    late.sort()
    out = {
        "prefilled": prefilled,
        "sent": sent,
        "elapsed_wall_s": elapsed,
        "produced_rate": sent / elapsed * s.time_scale,  # scenario events per second
        "late_sends": len(late),
        "late_p99_s": late[int(0.99 * (len(late) - 1))] if late else 0.0,
        "late_max_s": late[-1] if late else 0.0,
        "prefill_late_s": prefill_late_s,
    }
    stats.write_text(json.dumps(out), encoding="utf-8")
    return out
