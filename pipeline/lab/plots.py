"""The run's PNG plots (matplotlib, Agg: no display needed). Predicted lines are dashed.

matplotlib is the optional ``lab`` extra (``pip install 'fleet-pipeline[lab]'``), imported only
when plots are drawn: ``fleet lab predict`` and the rest of the package work without it, and
``fleet lab run`` calls :func:`require_plotting` before it starts anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from pipeline.errors import ConfigError
from pipeline.reasons import Lab

from .model import Prediction
from .observe import Tick
from .scenario import Scenario
from .step_log import Step, in_flight_series
from .tick_series import consumed_series

INSTALL_HINT = "pip install 'fleet-pipeline[lab]'"


def require_plotting() -> None:
    """Fail early, before a run starts anything, when matplotlib is not installed."""
    _pyplot()


def _pyplot() -> ModuleType:
    try:
        import matplotlib
    except ImportError as e:
        raise ConfigError(
            f"fleet lab run draws its plots with matplotlib, which is not installed: "
            f"{INSTALL_HINT} ('fleet lab predict' works without it)",
            reason=Lab.LAB_PLOTS_UNAVAILABLE,
        ) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _shade_outages(ax: object, s: Scenario) -> None:
    for o in s.outages:
        ax.axvspan(o.at_s, o.at_s + o.duration_s, color="grey", alpha=0.15)  # type: ignore[attr-defined]


def write_plots(
    out: Path, s: Scenario, p: Prediction, ticks: Sequence[Tick], steps: Sequence[Step]
) -> list[str]:
    plt = _pyplot()
    written: list[str] = []
    times = [t.t for t in ticks]

    fig, ax = plt.subplots(figsize=(9, 4))
    for part in range(s.partitions):
        ax.plot(times, [t.lag[part] for t in ticks], linewidth=0.8)
    ax.plot(times, [sum(t.lag) / s.partitions for t in ticks], "k-", linewidth=2, label="mean")
    _shade_outages(ax, s)
    ax.set(title=f"{s.name}: lag per partition (messages)", xlabel="scenario seconds", ylabel="lag")
    ax.legend()
    written.append(_save(plt, fig, out / "lag.png"))

    ctimes, rates = consumed_series(ticks)
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(ctimes, rates, label="measured consume rate")
    ax.axhline(p.capacity, linestyle="--", color="red", label=f"capacity {p.capacity:.3g}/s")
    ax.axhline(p.rate, linestyle=":", color="green", label=f"arrivals {p.rate:.3g}/s")
    _shade_outages(ax, s)
    ax.set(title="throughput against capacity", xlabel="scenario seconds", ylabel="events/s")
    ax.legend()
    written.append(_save(plt, fig, out / "throughput.png"))

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(times, in_flight_series(steps, times), label="measured in flight")
    ax.axhline(p.in_flight, linestyle="--", color="red", label=f"Little's law {p.in_flight:.3g}")
    ax.axhline(p.busy_lanes, linestyle=":", color="black", label=f"lanes {p.busy_lanes}")
    _shade_outages(ax, s)
    ax.set(title="in flight against Little's law", xlabel="scenario seconds", ylabel="steps")
    ax.legend()
    written.append(_save(plt, fig, out / "in_flight.png"))

    seen: set[int] = set()
    dup_t, dup_n, n = [0.0], [0], 0
    for st in sorted((x for x in steps if not x.poison), key=lambda x: x.t0):
        if st.seq in seen:
            n += 1
            dup_t.append(st.t0)
            dup_n.append(n)
        seen.add(st.seq)
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.step([*dup_t, s.duration_s], [*dup_n, n], where="post", label="measured redelivered steps")
    ax.axhline(p.duplicates_bound, linestyle="--", color="red", label=f"bound {p.duplicates_bound}")
    _shade_outages(ax, s)
    ax.set(title="duplicates against their bound", xlabel="scenario seconds", ylabel="steps")
    ax.legend()
    written.append(_save(plt, fig, out / "duplicates.png"))
    return written


def _save(plt: ModuleType, fig: object, path: Path) -> str:
    fig.tight_layout()  # type: ignore[attr-defined]
    fig.savefig(path, dpi=90)  # type: ignore[attr-defined]
    plt.close(fig)
    return path.name
