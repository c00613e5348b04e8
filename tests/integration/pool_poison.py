"""A pool step for the metrics test (``--handler tests.integration.pool_poison:step``): the
record ``poison`` is rejected for good, everything else is its own result."""

from __future__ import annotations

from pipeline.errors import FleetError
from pipeline.reasons import Failure
from pipeline.record import Record


def step(record: Record) -> str:
    value = (record.value or b"").decode()
    if value == "poison":
        raise FleetError("poison record", reason=Failure.HANDLER_REJECTED, retriable=False)
    return value
