"""``fleet init --host H`` writes a fleet.toml that loads, a key it names, and a trust folder
that trusts it; ``examples/fleet.toml`` names keys the way ``fleet keys init`` writes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.envelope import Signer, TrustStore
from pipeline.host.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"
runner = CliRunner()


def test_init_writes_a_working_host(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["init", "--host", "H1", "--dir", str(tmp_path), "--bootstrap", "k:9093", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    cfg = load_config(out["config"])
    assert (cfg.host, cfg.bootstrap) == ("H1", "k:9093")
    assert cfg.key_file == out["private"] and cfg.trust_dir == out["trust_dir"]
    signer = Signer.load(cfg.key_file)
    assert signer.key_id == out["key_id"] and signer.host == "H1"
    assert Path(cfg.key_file).name == f"{signer.key_id}.key"
    assert Path(cfg.key_file).stat().st_mode & 0o077 == 0
    trusted = {k.key_id for k in TrustStore.load(cfg.trust_dir).all()}
    assert trusted == {signer.key_id}
    assert [e.gid for e in cfg.entities] == ["H1-main"]


def test_init_refuses_to_overwrite_and_checks_the_host_first(tmp_path: Path) -> None:
    assert runner.invoke(app, ["init", "--host", "H1", "--dir", str(tmp_path)]).exit_code == 0
    again = runner.invoke(app, ["init", "--host", "H1", "--dir", str(tmp_path)])
    assert again.exit_code == 1 and "refusing to overwrite" in again.output
    bad = runner.invoke(app, ["init", "--host", "no spaces", "--dir", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "INVALID_NAME" in bad.output
    assert not (tmp_path / "x" / "keys").exists(), "nothing written for a refused host"


def test_the_example_names_keys_as_keys_init_writes_them(tmp_path: Path) -> None:
    """The example's key_file is keys/<key id>.key, the name `fleet keys init` gives a key."""
    result = runner.invoke(
        app, ["keys", "init", "--host", "A", "--dir", str(tmp_path / "keys"), "--json"]
    )
    written = Path(json.loads(result.stdout)["private"]).relative_to(tmp_path)
    example = load_config(EXAMPLE)
    pattern = re.compile(r"keys/A\.[0-9a-f]{16}\.key")
    assert pattern.fullmatch(str(written)), written
    assert example.key_file is not None and pattern.fullmatch(example.key_file)
    assert example.trust_dir == "keys/trusted"
