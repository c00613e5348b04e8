"""The analysis's result: one row per quantity, predicted beside measured (pure).

A row is judged when both sides are numbers: measured within :data:`TOLERANCE` of predicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.capacity import formulas as f

TOLERANCE = 0.10  # acceptance: measured within +-10% of predicted


@dataclass(frozen=True, kw_only=True)
class Row:
    quantity: str
    predicted: Any
    measured: Any
    ratio: float | None
    ok: bool | None  # None: not comparable in this run (reported, not judged)
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Analysis:
    rows: list[Row]
    machine_bound: list[str]  # reasons; empty when the model, not the machine, decided
    series: dict[str, list[float]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


def compared(q: str, predicted: float | None, measured: float | None, note: str = "") -> Row:
    r = f.ratio(measured, predicted)
    ok = None if r is None else abs(r - 1.0) <= TOLERANCE
    return Row(quantity=q, predicted=predicted, measured=measured, ratio=r, ok=ok, note=note)
