"""The lean ``fleet`` entry (docs/cli.md "The lean path"): the hot commands without Typer.

Invariants checked here: each lean spec is its Typer command's parameters (names, flags,
required, types, defaults), and whatever the lean parser accepts click parses to the same
values; ``fleet --help`` lists the COMMANDS table; the lean path loads neither Typer, Rich,
SQLAlchemy nor confluent-kafka; a send through the lean path prints the same output and exits
with the same code as the Typer command; anything else falls back to the Typer command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.bootstrap.client import build_client
from pipeline.cli import entry
from pipeline.cli.commands import COMMANDS
from pipeline.cli.lean import SPECS
from pipeline.cli.main import app
from pipeline.envelope import Signer
from pipeline.gateway.socket_server import SocketServer
from pipeline.store import session_factory
from pipeline.testing import one_host

NOT_LEAN = ("typer", "rich", "click", "sqlalchemy", "confluent_kafka", "cryptography")
# Light, but each import is paid once per message: the COMMANDS table is for
# `fleet --help` (entry.root_help imports it), the config loader checks names with
# pipeline.kafka.names (not the TopicNames table), the socket client base64-encodes with binascii.
NOT_ON_SEND = ("pipeline.cli.commands", "pipeline.kafka.topics", "base64")
TABLE = {e.name: e for e in COMMANDS}


def _typer_command(name: str) -> Any:
    return TABLE[name].load()


# -- the options cannot drift ---------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_lean_spec_is_its_typer_commands_parameters(name: str) -> None:
    real = {}
    for p in _typer_command(name).params:
        if p.name == "help":
            continue
        assert (p.nargs, p.multiple, p.callback) == (1, False, None), p.name
        kind = p.type_descriptor.annotation
        assert getattr(p, "is_flag", False) == (kind is bool), p.name
        if p.param_type_name == "option":
            real[p.name] = ("option", tuple(p.opts) + tuple(p.secondary_opts), kind,
                            p.required, p.default, p.envvar)  # fmt: skip
        else:
            real[p.name] = ("argument", p.nargs, kind, p.required, p.default)
    spec = SPECS[name]
    lean = {
        o.dest: ("option", o.names, o.type, o.required, o.default, o.envvar) for o in spec.options
    }
    lean |= {a.dest: ("argument", 1, a.type, False, a.default) for a in spec.arguments}
    assert lean == real


SEND_ARGVS = [
    ["-c", "f.toml", "--from", "a", "--to", "b", "hi"],
    ["hi", "--to=b", "--from=a", "--config=f.toml"],
    ["-cf.toml", "--from", "a", "--to", "b", "--json", "--kind", "reply", "--ttl", "2.5", "-"],
    ["--from", "a", "-c", "f.toml", "--to", "b", "--", "--json"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--ttl", "1e3"],
    ["-c", "f.toml", "--from", "a", "--to", "", ""],
    # declined by the lean parser (Typer answers these): each must stay declined or agree
    ["-c", "f.toml", "--from", "a", "--to", "b", "--ttl", "soon"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--ttl", "1_000"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--ttl", " 2"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--ttl", "inf"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--json=yes"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "x", "y"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--to", "c"],
    ["-c", "f.toml", "--from", "a"],
    ["-c", "f.toml", "--from", "a", "--to"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "--help"],
    ["-c", "f.toml", "--from", "a", "--to", "b", "-x"],
    ["-c", "f.toml", "--from", "a", "--to", "--json"],
]
POLL_ARGVS = [
    ["-c", "f.toml", "--as", "m", "--limit", "7", "--wait=2.5", "--from", "b"],
    ["-c", "f.toml", "--as", "m", "--json"],
    ["-c", "f.toml", "--as", "m", "--limit", "+7"],
    ["-c", "f.toml", "--as", "m", "--limit", "7.0"],
    ["-c", "f.toml", "--as", "m", "--limit", "1_000"],
]


@pytest.mark.parametrize("argv", SEND_ARGVS, ids=" ".join)
def test_what_the_lean_parser_accepts_click_parses_the_same(argv: list[str]) -> None:
    lean = SPECS["send"].parse(argv)
    if lean is None:
        return  # Typer parses it (and gives its usage error or help)
    cmd = _typer_command("send")
    ctx = cmd.make_context("send", list(argv))
    assert lean == {k: (Path(v) if k == "config" else v) for k, v in ctx.params.items()}


@pytest.mark.parametrize("argv", POLL_ARGVS, ids=" ".join)
def test_what_the_lean_poll_parser_accepts_click_parses_the_same(argv: list[str]) -> None:
    lean = SPECS["poll"].parse(argv)
    if lean is None:
        return
    ctx = _typer_command("poll").make_context("poll", list(argv))
    assert lean == {k: (Path(v) if k == "config" else v) for k, v in ctx.params.items()}


def test_the_lean_parser_declines_what_it_does_not_take_whole() -> None:
    assert [a for a in POLL_ARGVS if SPECS["poll"].parse(a) is not None] == POLL_ARGVS[:2]
    accepted = [a for a in SEND_ARGVS if SPECS["send"].parse(a) is not None]
    assert accepted == SEND_ARGVS[:6]
    assert SPECS["send"].parse(SEND_ARGVS[2]) == {
        "config": Path("f.toml"), "sender": "a", "to": "b", "body": "-", "kind": "reply",
        "ttl": 2.5, "trace": None, "as_json": True,
    }  # fmt: skip


# -- fleet --help -----------------------------------------------------------------------------------
def test_the_lean_help_lists_the_commands_table_in_order() -> None:
    text = entry.root_help()
    rows = [re.search(rf"^  {e.name} +(.*)$", text, re.M) for e in COMMANDS]
    assert all(rows), text
    assert [r.group(1) for r in rows if r] == [" ".join(e.help.split()) for e in COMMANDS]
    assert [r.start() for r in rows if r] == sorted(r.start() for r in rows if r)
    typer_help = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    for name, _ in entry.ROOT_OPTIONS:  # the root options Typer lists, no more, no fewer
        assert name in typer_help
    assert set(re.findall(r"^│ (--[a-z-]+)", typer_help, re.M)) == {
        n for n, _ in entry.ROOT_OPTIONS
    }


# -- a real gateway socket, the real commands ------------------------------------------------------
@pytest.fixture
def host(tmp_path: Path):  # type: ignore[no-untyped-def]
    one = one_host(tmp_path)
    cfg, engine, store, key = one.config, one.engine, one.store_url, one.key_file
    config = tmp_path / "fleet.toml"
    config.write_text(
        f'host = "A"\nstore_url = "{store}"\nkey_file = "{key}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    yield cfg, engine, config
    engine.dispose()


@pytest.fixture
def gateway(host):  # type: ignore[no-untyped-def]
    cfg, engine, config = host
    client = build_client(cfg, signer=Signer.load(cfg.key_file or ""), engine=engine)
    server = SocketServer(path=cfg.local_socket or "", client=client).start()
    yield config
    server.close()


LEAN = "from pipeline.cli.entry import main\nmain({argv!r})\n"
TYPER = "from pipeline.cli.main import app\napp({argv!r}, prog_name='fleet')\n"
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('\\nLOADED ' + ' '.join(sorted(({{m.split('.')[0]"
    " for m in sys.modules}} | set(sys.modules)) & set({not_lean!r}))) + '\\n'))\n"
)


def _run(
    code: str, argv: list[str], stdin: str = "", watch: tuple[str, ...] = NOT_LEAN
) -> tuple[int, str, str, list[str]]:
    """Exit code, stdout, stderr and which of ``watch`` (top-level packages or modules) one
    fresh process loaded."""
    src = PROBE.format(not_lean=watch) + code.format(argv=argv)
    done = subprocess.run([sys.executable, "-c", src], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    err, _, loaded = done.stderr.rpartition("\nLOADED ")
    return done.returncode, done.stdout, err, loaded.split()


def _same(out: str) -> str:
    """Output with the minted ids masked (each process mints its own)."""
    return re.sub(r"[0-9a-f]{8}-?[0-9a-f-]{20,}", "<id>", out)


SEND = ["send", "--from", "main-a"]
CASES = [
    ["--to", "main-b", "hello"],
    ["--to", "main-b", "--json", "--kind", "reply", "--ttl", "60", "-"],
    ["--to", "nobody", "hello"],
    ["--to", "nobody", "--json", "hello"],
    ["--to", "main-b", "--kind", "shout", "hello"],
    ["--to", "main-b", "--kind", "shout", "--json", "hello"],
]


VERBS = [
    ["ask", "--from", "main-a", "--to", "main-b", "what now?"],
    ["ask", "--from", "main-a", "--to", "main-b", "--ttl", "30", "--json", "-"],
    ["ask", "--from", "main-a", "--to", "nobody", "what now?"],
    ["answer", "--from", "main-a", "--to", "main-b", "--turn", "t1", "this"],
    ["answer", "--from", "main-a", "--to", "main-b", "--turn", "t1", "--json", "this"],
    ["answer", "--from", "main-z", "--to", "main-b", "--turn", "t1", "this"],
    ["abandon", "--from", "main-a", "--to", "main-b", "--turn", "t1"],
    ["abandon", "--from", "main-a", "--to", "main-b", "--turn", "t1", "--json"],
    ["abandon", "--from", "main-a", "--to", "nobody", "--turn", "t1"],
]
ARGVS = [[*SEND, *case] for case in CASES] + VERBS


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_a_lean_command_is_the_typer_command_byte_for_byte(gateway: Path, argv: list[str]) -> None:
    argv = [*argv, "-c", str(gateway)]
    lean = _run(LEAN, argv, stdin="from stdin")
    typer = _run(TYPER, argv, stdin="from stdin")
    assert lean[0] == typer[0], (lean, typer)
    assert _same(lean[1]) == _same(typer[1])
    assert lean[2] == typer[2]
    assert lean[3] == [], lean  # the lean path ran: nothing heavy loaded
    assert "typer" in typer[3]


def test_an_abandon_through_the_socket_closes_the_turn_with_its_notice(
    gateway: Path, host: Any
) -> None:
    """R-CONV-2: the asker gives up its turn; a late ANSWER then gets TOO_LATE. Through
    the socket the turn is closed in the transaction that queues the ABANDONED notice."""
    from pipeline.host.socket_client import SocketClient

    cfg, engine, _ = host
    with SocketClient.connect(cfg.local_socket or "") as c:
        turn = c.ask(sender="main-a", to="main-b", body=b"?").turn_id
        assert turn is not None
        c.abandon(sender="main-a", to="main-b", turn_id=turn)
    with engine.connect() as conn:
        state = conn.exec_driver_sql("SELECT state FROM fleet_turns WHERE turn_id = ?", (turn,))
        assert state.scalar_one() == "abandoned"
        kinds = conn.exec_driver_sql("SELECT count(*) FROM outbox").scalar_one()
        assert kinds == 2


def test_a_lean_send_reaches_the_gateway(gateway: Path, host: Any) -> None:
    code, out, err, loaded = _run(LEAN, [*SEND, "-c", str(gateway), "--to", "main-b", "--json",
                                         "hi"])  # fmt: skip
    assert (code, err, loaded) == (0, "", [])
    assert json.loads(out)["via"] == "gateway"
    with host[1].connect() as c:
        assert c.exec_driver_sql("SELECT count(*) FROM outbox").scalar() == 1


def test_a_lean_send_leaves_out_what_only_other_paths_need(gateway: Path) -> None:
    argv = [*SEND, "-c", str(gateway), "--to", "main-b", "hi"]
    code, out, err, loaded = _run(LEAN, argv, watch=NOT_ON_SEND)
    assert (code, err, loaded) == (0, "", [])
    assert out.startswith("queued SEND ")


def test_without_a_gateway_the_lean_entry_runs_the_typer_send(host: Any) -> None:
    """No gateway answers: the send writes the store directly, as the Typer command does."""
    _cfg, engine, config = host
    code, out, err, loaded = _run(LEAN, [*SEND, "-c", str(config), "--to", "main-b", "--json",
                                         "hi"])  # fmt: skip
    assert (code, err) == (0, "")
    assert json.loads(out)["via"] == "store"
    assert "typer" in loaded and "sqlalchemy" in loaded
    with engine.connect() as c:
        assert c.exec_driver_sql("SELECT count(*) FROM outbox").scalar() == 1


def test_an_argv_the_lean_parser_declines_gets_typers_answer(gateway: Path) -> None:
    argv = [*SEND, "-c", str(gateway), "--to", "main-b", "--ttl", "soon", "hi"]
    lean, typer = _run(LEAN, argv), _run(TYPER, argv)
    assert lean[:3] == typer[:3]
    assert lean[0] == 2 and "'--ttl'" in lean[2]


def test_fleet_help_loads_nothing_heavy() -> None:
    code, out, err, loaded = _run(LEAN, ["--help"])
    assert (code, err, loaded) == (0, "", [])
    assert out == entry.root_help()


def _served_host_with_held(root: Path) -> tuple[Path, Any]:
    """A host whose gateway socket serves and whose main-a has two held receipts (the same rows,
    msg ids and times in every host made here, so two hosts print the same poll)."""
    from sqlalchemy import insert

    from pipeline.envelope.receipts import injected_body
    from pipeline.host.held import held_table

    root.mkdir()
    one = one_host(root)
    engine, store, key = one.engine, one.store_url, one.key_file
    now = 1_764_578_000_000
    row = {"recipient": "main-a", "sender": "B._gateway", "trace_id": "t", "headers": None,
           "topic": None, "ts_ms": now, "expires_at_ms": 10**15, "held_at_ms": now}  # fmt: skip
    with session_factory(engine).begin() as s:
        s.execute(insert(held_table), [
            row | {"msg_id": "r1", "kind": "INJECTED", "turn_id": None,
                   "body": injected_body("brief-1", "worker-b")},
            row | {"msg_id": "r2", "kind": "TOO_LATE", "turn_id": "t-7", "body": b""},
        ])  # fmt: skip
    config = root / "fleet.toml"
    config.write_text(
        f'host = "A"\nstore_url = "{store}"\nkey_file = "{key}"\n'
        '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    return config, SocketServer(path=one.config.local_socket or "", client=one.client).start()


@pytest.mark.parametrize("extra", [[], ["--json"], ["--from", "B._gateway", "--limit", "1"]])
def test_a_lean_poll_is_the_typer_poll_byte_for_byte(tmp_path: Path, extra: list[str]) -> None:
    """The same held receipts drained through the gateway by a lean and a Typer process (each
    from its own identical host) print the same lines or JSON; a second poll finds nothing."""
    outs = []
    for name, code in (("lean", LEAN), ("typer", TYPER)):
        config, server = _served_host_with_held(tmp_path / name)
        try:
            argv = ["poll", "-c", str(config), "--as", "main-a", *extra]
            outs.append(_run(code, argv))
            again = _run(code, [*argv, "--json"])
        finally:
            server.close()
        if "--limit" not in extra:
            assert again[:2] == (0, "[]\n"), again  # drained by the first poll
    lean, typer = outs
    assert lean[:3] == typer[:3] and lean[0] == 0, (lean, typer)
    assert lean[3] == [] and "typer" in typer[3]
    assert "brief-1 was injected into worker-b" in lean[1]


# -- fleet --version and FLEET_CONFIG ---------------------------------------------------------------
def test_fleet_version_prints_the_package_version_and_loads_nothing_heavy() -> None:
    import pipeline

    code, out, err, loaded = _run(LEAN, ["--version"])
    assert (code, out, err, loaded) == (0, f"fleet {pipeline.__version__}\n", "", [])
    typer_out = CliRunner().invoke(app, ["--version"])
    assert (typer_out.exit_code, typer_out.output) == (0, out)


def test_fleet_config_in_the_environment_stands_in_for_dash_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["--from", "a", "--to", "b", "hi"]
    assert SPECS["send"].parse(argv) is None  # no --config: Typer would say it is missing
    monkeypatch.setenv("FLEET_CONFIG", "env.toml")
    lean = SPECS["send"].parse(argv)
    assert lean is not None and lean["config"] == Path("env.toml")
    ctx = _typer_command("send").make_context("send", list(argv))
    assert lean == {k: (Path(v) if k == "config" else v) for k, v in ctx.params.items()}
    assert SPECS["send"].parse(["-c", "f.toml", *argv])["config"] == Path("f.toml")  # type: ignore[index]
