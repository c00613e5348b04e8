"""report.json and report.md: predicted and measured side by side, with their ratio."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .comparison import Analysis
from .model import Prediction
from .scenario import Scenario


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "never" if math.isinf(v) else f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "never"
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return v


def report_json(s: Scenario, p: Prediction, a: Analysis, extra: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = _json_safe(
        {
            "scenario": s.name,
            "time_scale": s.time_scale,
            "prediction": p.to_json(),
            "comparison": [asdict(r) for r in a.rows],
            "agrees": all(r.ok for r in a.rows if r.ok is not None),
            "machine_bound": a.machine_bound,
            "facts": a.facts,
            **extra,
        }
    )
    return data


def write_reports(
    out: Path, s: Scenario, p: Prediction, a: Analysis, extra: dict[str, Any], plots: list[str]
) -> None:
    data = report_json(s, p, a, extra)
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    lines = [
        f"# Lab run: {s.name}",
        "",
        s.description,
        "",
        f"Time scale {s.time_scale:g} (scenario seconds x {s.time_scale:g} = wall seconds). "
        "All numbers below are in scenario time.",
        "",
        "| quantity | predicted | measured | measured / predicted | within ±10% | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in a.rows:
        ok = "-" if r.ok is None else ("yes" if r.ok else "**no**")
        lines.append(
            f"| {r.quantity} | {_cell(r.predicted)} | {_cell(r.measured)} | {_cell(r.ratio)} | {ok} | {r.note} |"
        )
    lines += ["", "## Who decided the result", ""]
    if a.machine_bound:
        lines.append("**The machine, not the model** -- treat the comparison above with care:")
        lines += [f"- {reason}" for reason in a.machine_bound]
    else:
        lines.append(
            "The model: CPU below 90% busy, the run's CPU per step within half the cores at "
            "this time scale, steps within 10% of their scheduled time, lanes busy while "
            "records waited, the producer kept the arrival rate."
        )
    f = a.facts
    if "fastest_time_scale" in f:
        lines += [
            "",
            f"This run cost {f['cpu_ms_per_step']:g} ms of CPU per step; at its busiest it "
            f"needed {f['cores_needed_at_peak']:.2f} of {f.get('machine_cores', '?')} cores. "
            f"The fastest time scale this machine holds for it: about "
            f"{f['fastest_time_scale']:.2g} (this run: {s.time_scale:g}).",
        ]
    lines += ["", "## Facts", ""]
    lines += [f"- {k}: {_cell(v)}" for k, v in sorted(a.facts.items())]
    lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in plots]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
