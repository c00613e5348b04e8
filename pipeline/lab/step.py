"""The lab's simulated agent step, run by pool members: sleep the event's step time (scaled)
and log when it ran, so the lab counts redeliveries and steps in flight from the members' side.

The record value is :meth:`pipeline.lab.arrivals.Event.payload` (``seq``, ``step_s``,
``poison``). The runner passes ``FLEET_LAB_TIME_SCALE``, ``FLEET_LAB_STEP_LOG`` and
``FLEET_LAB_MEMBER`` in the member's environment; these are read here, at the edge.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any


class PoisonStep(Exception):
    """The scenario's poison record: the step fails every time (seed 001 scenario 3)."""


_lock = threading.Lock()


def run_step(record: Any, *_: Any, partition: int = -1, offset: int = -1) -> dict[str, Any]:
    """Sleep ``step_s x FLEET_LAB_TIME_SCALE``; append one JSON line to ``FLEET_LAB_STEP_LOG``.

    ``record`` is a :class:`pipeline.runtime.record.Record` (or anything with ``value``,
    ``partition`` and ``offset``) or the raw value bytes; extra positional arguments (a
    transaction, a context) are ignored: the simulated step has no effect to stage."""
    if isinstance(record, bytes | bytearray) or record is None:
        value = record
    else:  # bytes has a .partition method: only a record-like object is asked for its fields
        value, partition, offset = record.value, int(record.partition), int(record.offset)
    event = json.loads(value or b"{}")
    scale = float(os.environ.get("FLEET_LAB_TIME_SCALE", "1"))
    t0 = time.time()
    time.sleep(max(0.0, float(event.get("step_s", 0.0)) * scale))
    t1 = time.time()
    line = {
        "seq": event.get("seq"),
        "member": os.environ.get("FLEET_LAB_MEMBER", "?"),
        "partition": partition,
        "offset": offset,
        "t0": t0,
        "t1": t1,
        "scheduled_s": float(event.get("step_s", 0.0)) * scale,
        "poison": bool(event.get("poison")),
    }
    path = os.environ.get("FLEET_LAB_STEP_LOG")
    if path:
        with _lock, open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
    if event.get("poison"):
        raise PoisonStep(f"poison record seq={event.get('seq')}")
    return line
