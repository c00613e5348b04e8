"""The shipped systemd units (deploy/systemd/) pass ``systemd-analyze verify`` -- no warning
either, since it exits 0 on a line it ignores -- and say what docs/gateway.md "Running as a
service" promises: restarted on failure but never after exit 1 or 3 (refused, or fenced or fatal: a person must
look), and the gateway ready only when it says so (``Type=notify``, READY=1 from /readyz)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = sorted((Path(__file__).parents[2] / "deploy" / "systemd").glob("*.service"))


def _service(unit: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(unit)
    return parser["Service"]


def test_the_units_are_shipped() -> None:
    assert {u.name for u in UNITS} == {
        "fleet-gateway@.service",
        "fleet-relay@.service",
        "fleet-exporter.service",
    }


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_analyze_verify_passes_without_a_word(unit: Path, tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    # a template is verified as an instance of it, which also expands %i
    target = tmp_path / unit.name.replace("@.", "@a.")
    shutil.copy(unit, target)
    done = subprocess.run(
        [tool, "verify", str(target)], capture_output=True, text=True, timeout=120, check=False
    )
    said = [line for line in (done.stdout + done.stderr).splitlines() if "fleet-" in line]
    assert done.returncode == 0 and not said, done.stdout + done.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_restarted_on_failure_but_not_after_a_fatal_exit(unit: Path) -> None:
    service = _service(unit)
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"  # the clean stop (pipeline/signals.py)
    if unit.name != "fleet-exporter.service":  # the exporter has no fenced state
        # refused (1) and fenced or fatal (3) need a person; retriable (75) restarts
        assert service["RestartPreventExitStatus"].split() == ["1", "3"]


def test_the_gateway_tells_systemd_when_it_is_ready() -> None:
    service = _service(next(u for u in UNITS if u.name == "fleet-gateway@.service"))
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert "--metrics-port" in service["ExecStart"]  # /readyz lives on the metrics port
