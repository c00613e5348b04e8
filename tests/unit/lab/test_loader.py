"""Scenario files: unknown keys and bad values are errors naming the key path and reason."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.lab.loader import load_scenario, scenario_from_mapping
from pipeline.lab.model import predict
from pipeline.lab.scenario import ArrivalKind, StepKind, StopSignal
from pipeline.pool.config import Assignment
from pipeline.reasons import Lab
from pipeline.runtime.lanes import Concurrency

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "lab"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_shipped_scenarios_load(path: Path) -> None:
    s = load_scenario(path)
    assert s.name.startswith("seed001-")
    # each run fits in about eight minutes of wall time -- time scales slow enough that a pool
    # step's fixed store cost stays a small share of a step on 2 cores -- except the worked
    # example, which runs in real time: its drain tolerates steps only 1.7% over schedule
    # (docs/lab.md, "How far the time scale can go")
    assert s.wall(s.duration_s) <= (1500 if path.stem == "worked_example" else 480)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_a_drain_up_to_the_tolerance_fits_in_the_run(path: Path) -> None:
    """A drain measured 10% longer than predicted still agrees: the run must last that long, or
    a drain inside the band is cut off and reported "not drained" (a miss)."""
    s = load_scenario(path)
    p = predict(s)
    for o, window in zip(p.outages, s.outages, strict=True):
        if math.isfinite(o.drain_s):
            assert window.at_s + window.duration_s + 1.1 * o.drain_s <= s.duration_s
    if p.lag_drain_s is not None and math.isfinite(p.lag_drain_s):
        assert 1.1 * p.lag_drain_s <= s.duration_s


def test_shipped_scenarios_run_in_bounded_time() -> None:
    """``make lab`` runs them all, one after the other: about forty minutes of wall time."""
    total = sum((s := load_scenario(path)).wall(s.duration_s) for path in EXAMPLES.glob("*.toml"))
    assert total <= 2100


def _err(data: dict[str, object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(data)
    return info.value


def test_unknown_keys_name_their_path() -> None:
    e = _err({"name": "x", "partitions": 4, "members": {"cuont": 2}})
    assert e.reason == Lab.LAB_UNKNOWN_KEY
    assert e.context["key"] == "members.cuont"
    e = _err(
        {"name": "x", "partitions": 4, "outages": [{"at_s": 1, "duration_s": 2, "sig": "kill"}]}
    )
    assert e.context["key"] == "outages[0].sig"
    assert _err({"name": "x", "partitions": 4, "partitons": 3}).context["key"] == "partitons"


def test_bad_values_name_their_path() -> None:
    e = _err({"name": "x", "partitions": 0})
    assert (e.reason, e.context["key"]) == (Lab.LAB_INVALID_VALUE, "partitions")
    e = _err({"name": "x", "partitions": 4, "step": {"kind": "gamma"}})
    assert e.context["key"] == "step.kind"
    e = _err({"name": "x", "partitions": 4, "step": {"mean_s": -1}})
    assert e.context["key"] == "step.mean_s"
    e = _err({"name": "x", "partitions": 4, "arrival": {"kind": "bursts", "rate": 1}})
    assert (e.reason, e.context["key"]) == (Lab.LAB_MISSING_KEY, "arrival.burst_rate")
    e = _err(
        {"name": "x", "partitions": 4, "outages": [{"at_s": 1, "duration_s": 2, "members": [7]}]}
    )
    assert e.context["key"] == "outages[0].members"
    e = _err(
        {"name": "x", "partitions": 4, "duration_s": 10, "outages": [{"at_s": 5, "duration_s": 9}]}
    )
    assert e.context["key"] == "outages[0].at_s"
    e = _err({"name": "x", "partitions": 3, "lag": {"initial": [1, 2]}})
    assert e.context["key"] == "lag.initial"
    assert _err({"partitions": 3}).reason == Lab.LAB_MISSING_KEY


def test_full_scenario_round_trip() -> None:
    s = scenario_from_mapping(
        {
            "name": "full",
            "partitions": 8,
            "duration_s": 100,
            "step": {"kind": "uniform", "mean_s": 1.5, "min_s": 1.0, "max_s": 2.0},
            "arrival": {
                "kind": "bursts",
                "rate": 2,
                "burst_rate": 10,
                "burst_every_s": 30,
                "burst_length_s": 5,
            },
            "outages": [{"at_s": 10, "duration_s": 5, "members": [0, 1], "signal": "kill"}],
            "restarts": [{"at_s": 50, "member": 2}],
        }
    )
    assert s.step.kind is StepKind.UNIFORM and s.step.worst == 2.0
    assert s.arrival.kind is ArrivalKind.BURSTS
    assert s.arrival.mean_rate == pytest.approx(10 * 5 / 30 + 2 * 25 / 30)
    assert s.outages[0].members == (0, 1) and s.outages[0].signal is StopSignal.KILL
    assert s.restarts[0].signal is StopSignal.TERM


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(tmp_path / "missing.toml")
    assert info.value.reason == Lab.LAB_SCENARIO_NOT_FOUND
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_scenario(bad)
    assert info.value.reason == Lab.LAB_SCENARIO_SYNTAX
    typo = tmp_path / "typo.toml"
    typo.write_text('name = "t"\npartitions = 2\n[keys]\ncount = 2\nskw = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_scenario(typo)
    assert str(typo) in str(info.value) and "keys.skw" in str(info.value)


def test_members_use_the_pools_own_option_types() -> None:
    """The lab passes ``assignment``/``concurrency`` to ``fleet pool run``: one enum each, the
    pool's, so a strategy the pool drops or renames fails the scenario load, not a run."""
    s = scenario_from_mapping(
        {
            "name": "x",
            "partitions": 4,
            "members": {"assignment": "cooperative-sticky", "concurrency": "key"},
        }
    )
    assert type(s.members.assignment) is Assignment
    assert type(s.members.concurrency) is Concurrency
    assert (s.members.assignment, s.members.concurrency) == (
        Assignment.COOPERATIVE_STICKY,
        Concurrency.KEY,
    )
