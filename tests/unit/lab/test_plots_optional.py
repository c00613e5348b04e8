"""matplotlib is the optional ``lab`` extra (docs/lab.md): without it ``fleet lab run`` refuses
before it starts anything, with ``LAB_PLOTS_UNAVAILABLE`` and the install line, and ``fleet lab
predict`` still works. ``sys.modules['matplotlib'] = None`` makes every import of it fail, as on
an install without the extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.errors import ConfigError
from pipeline.lab.loader import load_scenario
from pipeline.lab.model import predict
from pipeline.lab.plots import require_plotting, write_plots
from pipeline.reasons import Lab

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lab" / "worked_example.toml"
INSTALL = "pip install 'fleet-pipeline[lab]'"


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)


@pytest.mark.usefixtures("no_matplotlib")
def test_plotting_without_matplotlib_is_a_config_error_naming_the_extra(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        require_plotting()
    assert exc.value.reason == Lab.LAB_PLOTS_UNAVAILABLE
    assert INSTALL in str(exc.value)
    s = load_scenario(EXAMPLE)
    with pytest.raises(ConfigError, match=r"LAB_PLOTS_UNAVAILABLE"):
        write_plots(tmp_path, s, predict(s), [], [])
    assert not list(tmp_path.iterdir())


@pytest.mark.usefixtures("no_matplotlib")
def test_lab_run_without_matplotlib_fails_early_with_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)  # refused before the broker is asked
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["lab", "run", str(EXAMPLE), "--out", str(out)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1, result.output
    assert "LAB_PLOTS_UNAVAILABLE" in result.output
    assert INSTALL in result.output
    assert not out.exists()


@pytest.mark.usefixtures("no_matplotlib")
def test_lab_predict_needs_no_matplotlib() -> None:
    result = CliRunner().invoke(app, ["lab", "predict", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    assert '"prediction"' in result.output
