"""STOP and reap, the decisions (R-LIFE: on stop or reap the inbox goes away).

No broker: the pure STOP verdict, the launcher's liveness answer on real child processes, the
reaper's sweep on a real SQLite store, and ``fleet stop`` queueing through the outbox.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import insert, select
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.control import spawns
from pipeline.control.launcher import Launcher
from pipeline.control.metrics import LifecycleMetrics
from pipeline.control.reaper import Reaper
from pipeline.control.stop_handler import StopVerdict, decide_stop
from pipeline.envelope import Signer
from pipeline.host import roster_cache
from pipeline.host.entity_config import InjectorSpec, ProfileConfig
from pipeline.outbox.tables import outbox
from pipeline.presence.model import Gone
from pipeline.store import make_engine, session_factory

FAR = 10**15


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        ("live", StopVerdict.STOP),
        ("stopping", StopVerdict.ALREADY_GONE),
        ("reaped", StopVerdict.ALREADY_GONE),
        ("launching", StopVerdict.UNKNOWN_WORKER),
        ("refused", StopVerdict.UNKNOWN_WORKER),
        ("failed", StopVerdict.UNKNOWN_WORKER),
        (None, StopVerdict.UNKNOWN_WORKER),
    ],
)
def test_a_stop_stops_only_a_live_worker_and_is_idempotent(
    state: str | None, verdict: StopVerdict
) -> None:
    assert decide_stop(state) is verdict


def _profile(**kw: Any) -> ProfileConfig:
    spec = {"name": "p", "launch": ("sleep", "30")} | kw
    return ProfileConfig(injector=InjectorSpec(type="command", command=("cat",)), **spec)


def test_the_launcher_answers_whether_its_worker_process_still_runs(tmp_path: Path) -> None:
    """Without a check, a worker is its launch process: running until it exits (collected by
    waitpid, so no zombie passes for alive)."""
    launcher = Launcher(str(tmp_path))
    values = {"gid": "w-1", "brief_file": str(tmp_path / "b")}
    pid = launcher.launch(_profile(), values, None)
    try:
        assert launcher.running("w-1", pid)
    finally:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while launcher.running("w-1", pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not launcher.running("w-1", pid)
    assert launcher.running("w-x", None), "no pid known: never reaped on a guess"
    assert launcher.running("w-x", os.getpid()), "a live process that is not our child"


class _Forgotten(list[str]):
    """The reaper's ``forget``: the gids, and the cause each departure carried."""

    def __init__(self) -> None:
        super().__init__()
        self.causes: dict[str, Gone] = {}

    def __call__(self, gid: str, gone: Gone) -> None:
        self.append(gid)
        self.causes[gid] = gone


def _store(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'b.sqlite'}")
    with session_factory(engine).begin() as s:
        for gid, profile in (("w-dead", "dead"), ("w-alive", "alive")):
            s.execute(insert(spawns.spawns_table).values(
                spawn_id=gid, request_msg_id=f"m-{gid}", requester="main-a",
                requester_host="A", profile=profile, state=spawns.LIVE, created_ms=1,
            ))  # fmt: skip
    return engine


def test_the_sweep_reaps_a_dead_worker_once_and_leaves_a_live_one(tmp_path: Path) -> None:
    """The profile's check decides (exit 0 = alive); a reaped worker is forgotten (its entity
    and presence: the tombstone), marked reaped with cause ``died``, its held mail dropped,
    and counted; a second sweep finds nothing to do."""
    engine = _store(tmp_path)
    forgotten, dropped = _Forgotten(), []
    registry = CollectorRegistry()
    reaper = Reaper(
        sessions=session_factory(engine),
        profiles={
            "dead": _profile(name="dead", check=("false",)),
            "alive": _profile(name="alive", check=("true",)),
        },
        launcher=Launcher(str(tmp_path)),
        values=lambda row, profile: {"gid": row.spawn_id},
        forget=forgotten,
        drop_held=lambda session, gid: dropped.append(gid) or 0,
        metrics=LifecycleMetrics(registry),
    )
    assert reaper.sweep() == 1
    assert reaper.sweep() == 0
    assert forgotten == ["w-dead"] and dropped == ["w-dead"]
    assert forgotten.causes == {"w-dead": Gone.DIED}, "its departure says it died"
    with engine.connect() as c:
        rows = {r.spawn_id: r for r in c.execute(select(spawns.spawns_table))}
    assert (rows["w-dead"].state, rows["w-dead"].reason) == ("reaped", "died")
    assert rows["w-dead"].ended_ms is not None
    assert rows["w-alive"].state == "live"
    assert registry.get_sample_value("fleet_lifecycle_reaps_total", {"cause": "died"}) == 1
    engine.dispose()


def _config(tmp_path: Path, entities: str) -> Path:
    Signer.generate("A").write_private(tmp_path / "A.key")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        f'host = "A"\nstore_url = "sqlite:///{tmp_path / "A.sqlite"}"\n'
        f'key_file = "{tmp_path / "A.key"}"\n{entities}'
    )
    return cfg


def test_fleet_stop_queues_a_stop_to_the_workers_host_and_refuses_an_unknown_worker(
    tmp_path: Path,
) -> None:
    cfg = _config(tmp_path, '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n')
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, [
            roster_cache.RosterEntry("B._gateway", "B", "gateway", "none", (), FAR),
            roster_cache.RosterEntry("w-7", "B", "worker", "inject", (), FAR),
        ])  # fmt: skip
    out = CliRunner().invoke(app, ["stop", "-c", str(cfg), "--gid", "w-7", "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert (got["gid"], got["host"]) == ("w-7", "B") and got["stopId"].startswith("stop-")
    bad = CliRunner().invoke(app, ["stop", "-c", str(cfg), "--gid", "w-8"])
    assert bad.exit_code != 0 and "UNKNOWN_WORKER" in bad.output
    with engine.connect() as c:
        (row,) = c.execute(select(outbox)).all()
    assert row.topic == "fleet.control.B" and bytes(row.key) == b"B._gateway"
    engine.dispose()


def test_fleet_stop_needs_as_when_the_requester_is_ambiguous(tmp_path: Path) -> None:
    two = "".join(
        f'[[entities]]\ngid = "{g}"\nrole = "main"\ndelivery = "pull"\n' for g in ("m1", "m2")
    )
    out = CliRunner().invoke(app, ["stop", "-c", str(_config(tmp_path, two)), "--gid", "w-7"])
    assert out.exit_code != 0 and "--as" in out.output


def test_the_mcp_stop_and_workers_tools_queue_and_list_with_reason_coded_errors(
    tmp_path: Path,
) -> None:
    """The MCP face's ``stop`` and ``workers`` (no broker: both only touch the host's store)."""
    import asyncio

    from pipeline.bootstrap.client import build_client, build_control_client
    from pipeline.host.entity_config import EntityConfig
    from pipeline.host.gateway_config import GatewayConfig
    from pipeline.mcp.server import build_server
    from pipeline.presence.roles import Delivery, Role

    signer = Signer.generate("A")
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    cfg = GatewayConfig(host="A", store_url=f"sqlite:///{tmp_path / 'A.sqlite'}", entities=(main,))
    engine = make_engine(cfg.store_url)
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(s, [
            roster_cache.RosterEntry("B._gateway", "B", "gateway", "none", (), FAR),
            roster_cache.RosterEntry("w-7", "B", "worker", "inject", (), FAR),
        ])  # fmt: skip
    control = build_control_client(cfg, signer=signer, engine=engine)
    server = build_server(
        build_client(cfg, signer=signer, engine=engine), gid="main-a", control=control
    )
    control.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-9", job="j")

    async def session() -> tuple[Any, ...]:
        tools = {t.name: t for t in await server.list_tools()}
        ok = await server.call_tool("stop", {"worker": "w-7", "stop_id": "stop-x"})
        bad = await server.call_tool("stop", {"worker": "w-8"})
        listed = await server.call_tool("workers", {})
        return tools, ok, bad, listed

    tools, ok, bad, listed = asyncio.run(session())
    assert {"worker", "reason", "host", "stop_id"} <= set(tools["stop"].input_schema["properties"])
    assert ok.structured_content["stopId"] == "stop-x" and ok.structured_content["host"] == "B"
    assert bad.is_error and bad.structured_content["error"]["reason"] == "UNKNOWN_WORKER"
    (w,) = listed.structured_content["workers"]
    assert (w["gid"], w["host"], w["job"], w["state"], w["live"]) == ("w-9", "B", "j", "pending",
                                                                      False)  # fmt: skip
    engine.dispose()


class _Publisher:
    """Records what the stop handler stages (the answer path's only side effect)."""

    host = "B"
    gateway_id = "B._gateway"

    def __init__(self) -> None:
        self.staged: list[Any] = []

    def stage(self, session: Any, env: Any, *, to_host: str) -> None:
        self.staged.append((env.kind.value, env.to, to_host))


def test_a_stalled_stop_finished_twice_answers_once(tmp_path: Path) -> None:
    """Crash window: a STOP left ``stopping`` (its after-commit step raised) is finished again
    by the tick, racing nothing or a second finish: the worker is reaped once and the
    requester gets one answer (``stopping`` -> ``done`` is conditional)."""
    from pipeline.control import stops
    from pipeline.control.stop_handler import StopHandler

    engine = _store(tmp_path)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(spawns.spawns_table.update().where(spawns.spawns_table.c.spawn_id == "w-alive")
                  .values(state=spawns.STOPPING, reason="stop"))  # fmt: skip
        stops.add(s, stop_id="stop-1", gid="w-alive", request_msg_id="m-stop",
                  requester="main-a", requester_host="A", trace_id="t", state=stops.STOPPING,
                  created_ms=1)  # fmt: skip
    forgotten = _Forgotten()
    reaper = Reaper(
        sessions=sessions,
        profiles={"alive": _profile(name="alive", stop=("true",))},
        launcher=Launcher(str(tmp_path)),
        values=lambda row, profile: {"gid": row.spawn_id},
        forget=forgotten,
        drop_held=lambda session, gid: 0,
    )
    publisher = _Publisher()
    handler = StopHandler(publisher=publisher, sessions=sessions, reaper=reaper)  # type: ignore[arg-type]
    assert handler.retry_stalled(older_than_s=0) == 1
    handler._stop("stop-1")  # the late after-commit step of the same STOP
    assert handler.retry_stalled(older_than_s=0) == 0
    assert publisher.staged == [("INJECTED", "main-a", "A")]
    with engine.connect() as c:
        row = c.execute(select(spawns.spawns_table).where(
            spawns.spawns_table.c.spawn_id == "w-alive")).one()  # fmt: skip
        (stop,) = c.execute(select(stops.stops_table)).all()
    assert (row.state, row.reason, stop.state) == ("reaped", "stop", "done")
    assert forgotten.causes == {"w-alive": Gone.STOPPED}, "its departure says it was stopped"
    engine.dispose()
