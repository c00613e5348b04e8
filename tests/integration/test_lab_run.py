"""The lab on the real broker: its producer and observer, and a whole ``fleet lab run``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.lab.loader import load_scenario
from pipeline.lab.observe import Observer
from pipeline.lab.runner import pool_command_available
from pipeline.support.processes import spawn_fleet
from pipeline.testing import BrokerHandle

pytestmark = pytest.mark.kafka

TINY = """
name = "tiny"
description = "six partitions on four members, range: 2, 2, 1, 1"
partitions = 6
time_scale = 0.1
duration_s = 200

[members]
count = 4
max_poll_records = 20
assignment = "range"

[step]
mean_s = 1.0

[arrival]
rate = 3.0

[keys]
count = 60

[lag]
initial = [5, 0, 7, 0, 0, 1]
"""


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lab"


def _pool_command_exists() -> bool:
    return pool_command_available()


def test_producer_keeps_the_schedule_and_the_observer_reads_its_lag(
    kafka: BrokerHandle, new_topic, tmp_path: Path
) -> None:
    """Prefilled lag lands on its partitions, arrivals spread evenly (R-LAB-1: "events spread
    evenly"), and the observer reads every partition's lag through the project's lag reader."""
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY.replace("duration_s = 200", "duration_s = 60"), encoding="utf-8")
    s = load_scenario(scenario)
    topic = new_topic("lab", partitions=6)
    stats = tmp_path / "producer.json"
    proc = spawn_fleet(
        [
            "lab",
            "produce",
            str(scenario),
            "--bootstrap",
            kafka.bootstrap,
            "--topic",
            topic,
            "--start-at",
            repr(time.time() + 0.5),
            "--stats",
            str(stats),
        ]
    )
    assert proc.wait(timeout=60) == 0
    produced = json.loads(stats.read_text())
    assert produced["prefilled"] == 13 and produced["sent"] == 179  # 60 s x 3/s, t < 60
    observer = Observer(bootstrap=kafka.bootstrap, group="test.nogroup", topic=topic, partitions=6)
    try:
        tick = observer.tick(t=0.0, members_up=0)
    finally:
        observer.close()
    arrivals = [tick.log_end[p] - [5, 0, 7, 0, 0, 1][p] for p in range(6)]
    assert sum(arrivals) == 179 and max(arrivals) - min(arrivals) <= 1
    assert tick.lag == tick.log_end and tick.committed == [-1] * 6
    assert s.wall(s.duration_s) == pytest.approx(6.0)


@pytest.mark.skipif(not _pool_command_exists(), reason="needs 'fleet pool run' (pools branch)")
def test_lab_run_matches_assignment_exactly_and_throughput_within_tolerance(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-LAB-2 on a real pool: range gives 2, 2, 1, 1 exactly; throughput at the
    offered load within 10% of the model."""
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY.split("[lag]", maxsplit=1)[0], encoding="utf-8")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["lab", "run", str(scenario), "--out", str(out), "-b", kafka.bootstrap]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    rows = {r["quantity"]: r for r in report["comparison"]}
    assert rows["partitions per member"]["measured"] == [2, 2, 1, 1]
    throughput = rows["throughput at offered load (events/s)"]
    assert throughput["predicted"] == 3.0
    assert 0.9 <= throughput["ratio"] <= 1.1, throughput
    assert {"lag.png", "throughput.png", "report.md"} <= {p.name for p in out.iterdir()}


def _shipped() -> list[object]:
    """Each shipped scenario, timed out after its own wall time plus four minutes for the
    members' start-up, the group's settling and the analysis (the suite's 300 s default is
    shorter than lag_drain's 300 s of scenario at time scale 10)."""
    out: list[object] = []
    for path in sorted(EXAMPLES.glob("*.toml")):
        s = load_scenario(path)
        limit = pytest.mark.timeout(s.wall(s.duration_s) + 240)
        out.append(pytest.param(path, id=path.stem, marks=limit))
    return out


@pytest.mark.slow
@pytest.mark.lab_scenarios
@pytest.mark.skipif(not _pool_command_exists(), reason="needs 'fleet pool run' (pools branch)")
@pytest.mark.parametrize("path", _shipped())
def test_shipped_scenario_agrees_with_the_model(
    kafka: BrokerHandle, tmp_path: Path, path: Path
) -> None:
    """Each shipped scenario (R-LAB-6): assignment exactly, throughput and drain
    within 10%, redelivered within the bound (a failure shows whether the machine decided it)."""
    out = tmp_path / path.stem
    result = CliRunner().invoke(
        app, ["lab", "run", str(path), "--out", str(out), "-b", kafka.bootstrap]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    failed = [r for r in report["comparison"] if r["ok"] is False]
    assert not failed, (failed, "machine-bound:", report["machine_bound"])
