"""The lab's simulated agent step for the scenario's poison record (R-FAIL-3).

Every other scenario runs the pool's own built-in step (``fleet pool run --sleep 0
--time-scale X``: the record's JSON ``step_s`` wins, scaled). A scenario with ``[poison]`` runs
:func:`run_step` instead: the same sleep, and the poison record fails every attempt so the
runtime's one failure path (retry with backoff, then quarantine or dead-letter) applies. The
member's events log (``--events``) records every attempt either way.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pipeline.pool.steps import SleepStep


class PoisonStep(Exception):
    """The scenario's poison record: the step fails every time."""


def run_step(record: Any) -> dict[str, Any]:
    """Sleep the record's ``step_s x FLEET_LAB_TIME_SCALE``; raise for the poison record."""
    scale = float(os.environ.get("FLEET_LAB_TIME_SCALE", "1"))
    result = SleepStep("0", scale=scale)(record)
    try:
        poison = bool(json.loads(record.value or b"{}").get("poison"))
    except (ValueError, AttributeError):
        poison = False
    if poison:
        raise PoisonStep("poison record")
    return result
