"""The chaos pool's step (``fleet pool run --handler pipeline.chaos.pool_steps:step``).

A record's value is the JSON the pool workload submits: ``{"key", "seq", "step_s", "poison"}``.
The step sleeps ``step_s`` (an agent step, short so a repetition stays short) and returns its
``key:seq``. A ``poison`` record fails every time with a *retriable* error, so it takes the
runtime's whole failure path (R-FAIL-3): retries with backoff, then, its
budget spent in an ordered flow, ``Quarantine(RETRIES_EXHAUSTED)``: dead-lettered with that
reason and its key quarantined, later records of the key parked.
"""

from __future__ import annotations

import json
import time

from pipeline.record import Record


class PoisonError(RuntimeError):
    """An unexpected error, as a model call that always breaks on one input raises: the runtime
    classifies it as transient (``Retry``)."""


def step(record: Record) -> str:
    body = json.loads(record.value or b"{}")
    time.sleep(max(0.0, float(body.get("step_s", 0.0))))
    if body.get("poison"):
        raise PoisonError(f"poison record {body.get('key')}:{body.get('seq')}")
    return f"{body.get('key')}:{body.get('seq')}"
