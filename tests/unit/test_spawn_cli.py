"""``fleet spawn`` queues a SPAWN through the requester's outbox (no broker needed)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.control import spawn_requests_table
from pipeline.envelope import Signer
from pipeline.host import roster_cache
from pipeline.outbox.tables import outbox
from pipeline.store import make_engine, session_factory

FAR = 10**15


def test_fleet_spawn_queues_one_spawn_and_refuses_an_unknown_host(tmp_path: Path) -> None:
    Signer.generate("A").write_private(tmp_path / "A.key")
    store = f"sqlite:///{tmp_path / 'A.sqlite'}"
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        f'host = "A"\nstore_url = "{store}"\nkey_file = "{tmp_path / "A.key"}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    engine = make_engine(store)
    with session_factory(engine).begin() as s:
        entry = roster_cache.RosterEntry("B._gateway", "B", "gateway", "none", (), FAR)
        roster_cache.replace_all(s, [entry])
    args = ["spawn", "-c", str(cfg), "--as", "main-a", "--profile", "shell", "--json"]
    out = CliRunner().invoke(app, [*args, "--host", "B", "--id", "w-7", "--job", "j"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert (got["spawnId"], got["host"], got["profile"]) == ("w-7", "B", "shell")
    bad = CliRunner().invoke(app, [*args, "--host", "C"])
    assert bad.exit_code != 0 and "UNKNOWN_HOST" in bad.output
    with engine.connect() as c:
        assert [r.topic for r in c.execute(select(outbox))] == ["fleet.control.B"]
        (req,) = c.execute(select(spawn_requests_table)).all()
    assert (req.msg_id, req.spawn_id, req.job, req.state) == (got["msgId"], "w-7", "j", "pending")
    engine.dispose()
