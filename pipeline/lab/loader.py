"""Read a scenario TOML file into a :class:`~pipeline.lab.scenario.Scenario` (the edge).

Unknown keys are errors, never ignored: a typo in ``max_poll_records`` must not silently run
the default. Every message names the file, the key path (``outages[1].signal``) and the reason
code (the ``Lab`` family of :mod:`pipeline.reasons`). The layout::

    name, description, partitions, time_scale, duration_s, seed      (top level)
    [members]   count, max_poll_records, max_poll_interval_ms, session_timeout_ms,
                concurrency, max_in_flight, assignment, static_membership, dedupe
    [step]      kind, mean_s, min_s, max_s, sigma, worst_s
    [arrival]   kind, rate, burst_rate, burst_every_s, burst_length_s
    [keys]      count, skew
    [poison]    backoffs_s, count_attempts
    [lag]       initial, consume_rate
    [[outages]] at_s, duration_s, members ("all" or a list of indices), signal ("term"|"kill")
    [[restarts]] at_s, member, signal
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError
from pipeline.reasons import Lab
from pipeline.support.binder import Reasons, bind, in_file, read_toml

from .scenario import Scenario, bad

REASONS = Reasons(
    not_found=Lab.LAB_SCENARIO_NOT_FOUND,
    syntax=Lab.LAB_SCENARIO_SYNTAX,
    unknown_key=Lab.LAB_UNKNOWN_KEY,
    missing_key=Lab.LAB_MISSING_KEY,
    invalid=Lab.LAB_INVALID_VALUE,
)


def load_scenario(path: str | Path) -> Scenario:
    """Parse and validate one scenario file; errors name the file and the key path."""
    data = read_toml(path, REASONS)
    try:
        return scenario_from_mapping(data)
    except ConfigError as exc:
        raise in_file(exc, str(path)) from None


def scenario_from_mapping(data: Mapping[str, Any]) -> Scenario:
    """The same rules as :func:`load_scenario`, on already parsed TOML."""
    values = dict(data)
    outages = data.get("outages")
    if isinstance(outages, list):
        values["outages"] = [_outage(raw, f"outages[{i}]") for i, raw in enumerate(outages)]
    return bind(Scenario, values, reasons=REASONS)


def _outage(raw: Any, at: str) -> Any:
    """``members = "all"`` is the default (every member); else a list of member indices."""
    if isinstance(raw, dict) and "members" in raw:
        members = raw["members"]
        if members == "all":
            return {k: v for k, v in raw.items() if k != "members"}
        if not isinstance(members, list) or not all(
            isinstance(m, int) and not isinstance(m, bool) for m in members
        ):
            raise bad(f"{at}.members", members, '"all" or a list of member indices')
    return raw
