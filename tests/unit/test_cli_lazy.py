"""The ``fleet`` entry loads subcommands on use (docs/cli.md).

Invariant: the CLI entry imports no heavy dependency; each subcommand loads its own. The table in
``pipeline/cli/main.py`` stands in for the commands until one runs, so these tests hold it to
them: same names, same listing help, no command a module defines left out.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import main
from pipeline.cli.lazy import Lazy, listing_help

CLI_DIR = Path(main.__file__).parent
HEAVY = ("sqlalchemy", "confluent_kafka", "mcp", "matplotlib", "alembic")
# What a send needs is the store and the envelope; none of these.
NOT_FOR_SEND = (
    "mcp",
    "matplotlib",
    "alembic",
    "confluent_kafka",
    # the composition root's process builders (a send needs only pipeline.bootstrap.client)
    "pipeline.bootstrap.gateway",
    "pipeline.bootstrap.mcp",
    "pipeline.bootstrap.pools",
    "pipeline.bootstrap.reporters",
    "pipeline.bootstrap.sagas",
    "pipeline.bootstrap.retention",
    "pipeline.lab",
    "pipeline.pool",
    "pipeline.observability",
    "pipeline.runtime",
)


@pytest.mark.parametrize("entry", main.COMMANDS, ids=lambda e: f"fleet-{e.name}")
def test_each_table_help_is_the_first_paragraph_of_its_commands_help(entry: Lazy) -> None:
    real = entry.load()
    assert real.name == entry.name
    assert entry.help == listing_help(real.help), f"update the {entry.name!r} line in main.py"


def test_every_command_a_module_defines_has_one_line_and_every_module_is_listed() -> None:
    names = [e.name for e in main.COMMANDS]
    assert len(names) == len(set(names))
    for entry in main.COMMANDS:
        same_role = {
            e.name for e in main.COMMANDS if (e.module, e.group) == (entry.module, entry.group)
        }
        assert set(entry.module_commands()) == same_role, entry.module
    modules = {p.stem for p in CLI_DIR.glob("*_cmd.py")}
    assert modules == {e.module for e in main.COMMANDS}


def test_help_lists_every_command_in_table_order() -> None:
    out = CliRunner().invoke(main.app, ["--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    rows = [re.search(rf"^│ {e.name} ", out.output, re.M) for e in main.COMMANDS]
    positions = [row.start() if row else -1 for row in rows]
    assert -1 not in positions, out.output
    assert positions == sorted(positions)
    assert main.COMMANDS[0].help in out.output


def test_a_mistyped_command_still_gets_a_suggestion() -> None:
    out = CliRunner().invoke(main.app, ["sendd"])
    assert out.exit_code == 2
    assert "Did you mean 'send'" in out.output


def _loaded_after(code: str, cwd: Path | None = None) -> list[str]:
    probe = (
        "import sys\n"
        f"{code}\n"
        f"prefixes = {HEAVY + NOT_FOR_SEND!r}\n"
        "print('\\n' + __import__('json').dumps(sorted({p for p in prefixes for m in sys.modules"
        " if m == p or m.startswith(p + '.')})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert out.returncode == 0, out.stderr
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def _run_cli(args: list[str]) -> str:
    return (
        "from pipeline.cli.main import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )


def test_importing_the_entry_loads_no_heavy_dependency() -> None:
    loaded = _loaded_after("import pipeline.cli.main")
    assert not set(loaded) & set(HEAVY), loaded


def test_fleet_help_and_send_help_load_no_heavy_dependency() -> None:
    for args in (["--help"], ["send", "--help"]):
        loaded = _loaded_after(_run_cli(args))
        assert not set(loaded) & set(HEAVY), (args, loaded)


def test_a_send_loads_the_store_and_envelope_but_not_the_rest(tmp_path: Path) -> None:
    """A real ``fleet send`` to a recipient the roster cache knows (no broker needed: the
    message waits in the outbox), on a store already at head."""
    from pipeline.envelope import Signer
    from pipeline.host import roster_cache
    from pipeline.store import make_engine, session_factory

    Signer.generate("A").write_private(tmp_path / "A.key")
    store = f"sqlite:///{tmp_path / 'A.sqlite'}"
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        f'host = "A"\nstore_url = "{store}"\nkey_file = "{tmp_path / "A.key"}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    engine = make_engine(store)
    with session_factory(engine).begin() as s:
        entry = roster_cache.RosterEntry("main-b", "B", "main", "pull", (), 10**15)
        roster_cache.replace_all(s, [entry])
    engine.dispose()
    send = ["send", "-c", str(cfg), "--from", "main-a", "--to", "main-b", "--json", "hi"]
    loaded = _loaded_after(_run_cli(send) + "assert 'sqlalchemy' in sys.modules\n")
    assert not set(loaded) & set(NOT_FOR_SEND), loaded
    engine = make_engine(store)
    with engine.connect() as c:
        assert c.exec_driver_sql("SELECT count(*) FROM outbox").scalar() == 1
    engine.dispose()
