"""How long a backlog took to drain, measured from the ticks and set beside the model (pure).

A drain starts at an outage's end or at t = 0 (initial lag) and ends when total lag is back at
the run's baseline; the pool's capacity is read while it lasted. ``docs/lab.md`` says why.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

from pipeline.capacity import formulas as f

from .comparison import Row, compared
from .model import Prediction
from .observe import Tick
from .scenario import Scenario
from .tick_series import committed_total, lag_crossing, rate_between, settled


def _drain(
    ticks: Sequence[Tick], start: float, baseline: float
) -> tuple[float | None, Tick | None, Tick | None]:
    """Seconds from ``start`` until total lag is back at ``baseline``; also the first tick with
    progress (the group rejoined) and the tick where the drain ended.

    The lag is a sample per tick (0.5-0.7 wall s apart), so the drain ends between the last tick
    above ``baseline`` and the first one at or below it: the crossing is interpolated linearly
    between the two. Taking the later tick instead would add half a tick period on average --
    5% of lag_drain's 14 s at time scale 1."""
    after = [t for t in ticks if t.t >= start]
    if not after:
        return None, None, None
    first = after[0]
    rejoined = next((t for t in after if committed_total(t) > committed_total(first)), None)
    for prev, t in itertools.pairwise([None, *after]):
        if rejoined is not None and t is not None and t.t >= rejoined.t and sum(t.lag) <= baseline:
            return lag_crossing(prev, t, baseline) - start, rejoined, t
    return None, rejoined, None


def _at_measured(
    row: Row, facts: dict[str, Any], rate: float, backlog: float, capacity: float, rejoin_s: float
) -> Row:
    """The model's drain with this run's own capacity and rejoin (arrivals go on meanwhile):
    ``rejoin + (backlog + rate x rejoin) / (capacity - rate)``. A measured drain that agrees
    with it and not with the prediction was decided by those two numbers, not by the formula
    -- at 83% utilisation a capacity 4% short alone turns the worked example's 900 s into
    1,184 s, and each second of rejoin adds 6."""
    at = rejoin_s + f.drain_seconds(backlog + rate * rejoin_s, capacity, rate)
    facts["drain_at_measured_capacity_s"] = at
    said = "never" if math.isinf(at) else f"{at:,.0f} s"
    note = f"the model at the measured capacity {capacity:.3g}/s and this rejoin: {said}"
    return dataclasses.replace(row, note=f"{row.note}; {note}" if row.note else note)


def drain_rows(
    s: Scenario,
    p: Prediction,
    ticks: Sequence[Tick],
    drain: tuple[str, float, float, float],
    baseline: float,
    facts: dict[str, Any],
) -> list[Row]:
    """A drain's row (or "never" row) and the pool's capacity measured while it lasted."""
    label, start, predicted, backlog = drain
    rows: list[Row] = []
    took, rejoined, done = _drain(ticks, start, baseline)
    if math.isinf(predicted):
        end_lag = sum(ticks[-1].lag) if ticks else 0
        drained = took is not None
        rows.append(
            Row(
                quantity=label,
                predicted="never",
                measured=took if drained else "not drained",
                ratio=None,
                ok=not drained,
                note=f"lag at the end of the run: {end_lag}",
            )
        )
    else:
        note = ""
        if rejoined is not None:
            after = "the start" if start == 0.0 else "the restart (rejoin)"
            note = f"first progress {rejoined.t - start:.1f} s after {after}"
        if took is None:  # predicted to drain, and did not by the end of the run: a miss
            rows.append(
                Row(
                    quantity=label,
                    predicted=predicted,
                    measured="not drained",
                    ratio=None,
                    ok=False,
                    note=note,
                )
            )
        else:
            rows.append(compared(label, predicted, took, note))
    # the pool's capacity, read while the backlog lasted: from the group's first stable
    # plan after the rejoin (the first member back may hold every partition until the
    # others join, then a stop-the-world rebalance follows) until it drained, or -- a drain
    # that outlasts the run (a slow rejoin, utilisation near 1, "never") -- the run's end
    until = done if done is not None else (ticks[-1] if ticks else None)
    if rejoined is not None and until is not None:
        since = next((t for t in ticks if rejoined.t <= t.t and settled(t, s)), rejoined)
        if until.t > since.t:
            capacity = rate_between(since, until)
            if math.isfinite(predicted) and capacity is not None:
                rows[0] = _at_measured(
                    rows[0], facts, p.rate, backlog, capacity, rejoined.t - start
                )
            rows.append(
                compared(
                    "throughput at saturation (events/s)",
                    p.capacity,
                    capacity,
                    "mean consume rate while the backlog drained (from the first stable plan)"
                    if done is not None
                    else "mean consume rate from the first stable plan after the rejoin "
                    "to the end of the run (the backlog outlasted it)",
                )
            )
    return rows
