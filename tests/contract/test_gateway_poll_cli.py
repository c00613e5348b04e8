"""``fleet poll`` shows receipts decoded (no raw Avro bytes, no empty TOO_LATE)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import insert
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.envelope import Signer
from pipeline.envelope.receipts import injected_body
from pipeline.host.held import held_table
from pipeline.store import make_engine, session_factory

runner = CliRunner()


def _host(tmp_path: Path) -> Path:
    Signer.generate("A").write_private(tmp_path / "A.key")
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'host = "A"\nstore_url = "sqlite:///{tmp_path / "A.sqlite"}"\n'
        f'key_file = "{tmp_path / "A.key"}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    now = int(time.time() * 1000)
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    row = {"recipient": "main-a", "sender": "B._gateway", "trace_id": "t", "headers": None,
           "topic": None, "ts_ms": now, "expires_at_ms": now + 60_000, "held_at_ms": now}  # fmt: skip
    with session_factory(engine).begin() as s:
        s.execute(insert(held_table), [
            row | {"msg_id": "r1", "kind": "INJECTED", "turn_id": None,
                   "body": injected_body("brief-1", "worker-b")},
            row | {"msg_id": "r2", "kind": "TOO_LATE", "turn_id": "t-7", "body": b""},
        ])  # fmt: skip
    engine.dispose()
    return config


def test_poll_json_decodes_receipts(tmp_path: Path) -> None:
    config = _host(tmp_path)
    result = runner.invoke(app, ["poll", "--config", str(config), "--as", "main-a", "--json"])
    assert result.exit_code == 0, result.output
    injected, late = json.loads(result.stdout)
    assert injected["about"] == "brief-1" and injected["body"] is None
    assert "worker-b" in injected["text"]
    assert late["turnId"] == "t-7" and late["reason"] == "TOO_LATE" and "t-7" in late["text"]


def test_poll_text_is_one_sentence_per_message(tmp_path: Path) -> None:
    config = _host(tmp_path)
    env = {"COLUMNS": "300", "NO_COLOR": "1"}
    result = runner.invoke(app, ["poll", "--config", str(config), "--as", "main-a"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert "brief-1 was injected into worker-b" in lines[0]
    assert lines[1].startswith("TOO_LATE") and "turn t-7" in lines[1]
