"""Who may SPAWN a profile and STOP a worker (R-LIFE-4, R-SPAWN-6): the pure rule, the config
keys, and the STOP handler's refusal on a real SQLite store (no broker)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import insert, select

from pipeline.control import spawns, stops
from pipeline.control.authority import Requester, may_spawn, may_stop
from pipeline.control.metrics import LifecycleMetrics
from pipeline.control.stop_handler import StopHandler, StopVerdict, _Decision, _Stop
from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import read_receipt
from pipeline.errors import ConfigError
from pipeline.host.config import config_from_mapping
from pipeline.host.entity_config import InjectorSpec, ProfileConfig, SpawnAllowed
from pipeline.presence.roles import Role
from pipeline.store import make_engine, session_factory

WORKER = SimpleNamespace(spawn_id="w-1", requester="main-a", requester_host="A", job="J")


def _stop(gid: str, host: str, role: str | None, *, in_job: bool = False, job: Any = "J") -> Any:
    worker = SimpleNamespace(**{**vars(WORKER), "job": job})
    return may_stop(Requester(gid, host, role), worker, operators=("ops",),
                    spawned_into_job=in_job, host="B")  # fmt: skip


def test_only_the_spawner_a_main_of_its_job_or_an_operator_may_stop_a_worker() -> None:
    assert _stop("main-a", "A", "main") is None  # its spawner
    assert _stop("main-a", "A", "worker") is None  # its spawner, whatever its role now
    assert _stop("ops", "C", "worker") is None  # an operator of B
    assert _stop("main-x", "C", "main", in_job=True) is None  # a main that spawned into J
    refusals = [
        _stop("main-a", "C", "main"),  # the spawner's gid from another host: not it
        _stop("main-x", "C", "main"),  # a main of no shared job
        _stop("main-x", "C", "main", in_job=True, job=None),  # the worker has no job
        _stop("orch", "C", "orchestrator", in_job=True),  # spawned into J, but no main
        _stop("w-9", "A", None),  # unknown role, not listed
    ]
    assert all(refusals), refusals
    assert refusals[1] == (
        "main-x@C (role main) may not stop w-1: it is neither its spawner (main-a@A), a main "
        "of its job (job 'J'), nor an operator of host B"
    )


def _profile(allowed: SpawnAllowed | None) -> ProfileConfig:
    injector = InjectorSpec(type="command", command=("cat",))
    return ProfileConfig(name="p", launch=("true",), injector=injector, spawn_allowed=allowed)


def test_spawn_allowed_admits_a_listed_role_gid_or_host_and_no_one_else() -> None:
    anyone = _profile(None)
    assert may_spawn(Requester("w-9", "Z", None), anyone) is None
    listed = _profile(SpawnAllowed(roles=(Role.MAIN,), gids=("orch-1",), hosts=("A",)))
    assert may_spawn(Requester("m", "C", "main"), listed) is None
    assert may_spawn(Requester("orch-1", "C", "orchestrator"), listed) is None
    assert may_spawn(Requester("w", "A", "worker"), listed) is None
    why = may_spawn(Requester("w", "C", "worker"), listed)
    assert why is not None and "w@C (role worker) may not spawn profile 'p'" in why
    assert may_spawn(Requester("m", "A", "main"), _profile(SpawnAllowed())) is not None


def _config(**extra: Any) -> Any:
    return config_from_mapping({"host": "B", **extra}, environ={})


def test_the_config_keys_load_and_refuse_bad_values() -> None:
    profile = {
        "name": "p",
        "launch": ["true"],
        "injector": {"type": "command", "command": ["cat"]},
        "spawn_allowed": {"roles": ["main"], "gids": ["orch-1"], "hosts": ["A"]},
    }
    cfg = _config(operators=["ops-1"], profiles=[profile])
    assert cfg.operators == ("ops-1",)
    assert cfg.profiles[0].spawn_allowed == SpawnAllowed(
        roles=(Role.MAIN,), gids=("orch-1",), hosts=("A",)
    )
    assert _config().operators == () and _config(profiles=[{**profile, "spawn_allowed": None}])
    for bad in (
        {"operators": ["bad gid!"]},
        {"profiles": [{**profile, "spawn_allowed": {"roles": ["gateway"]}}]},
        {"profiles": [{**profile, "spawn_allowed": {"gid": ["x"]}}]},  # unknown key
    ):
        with pytest.raises(ConfigError):
            _config(**bad)


class _Publisher:
    host, gateway_id = "B", "B._gateway"

    def __init__(self) -> None:
        self.staged: list[Envelope] = []

    def stage(self, session: Any, env: Envelope, *, to_host: str) -> None:
        self.staged.append(env)


class _NoReaper:
    def end_process(self, row: Any) -> None:
        raise AssertionError("a refused STOP ended a process")

    def finish(self, *args: Any, **kw: Any) -> bool:
        raise AssertionError("a refused STOP reaped a worker")


def test_a_refused_stop_stops_nothing_and_answers_one_failed(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'b.sqlite'}")
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(insert(spawns.spawns_table).values(
            spawn_id="w-1", request_msg_id="m-1", requester="main-a", requester_host="A",
            profile="p", job="J", state=spawns.LIVE, created_ms=1,
        ))  # fmt: skip
    publisher, registry = _Publisher(), CollectorRegistry()
    handler = StopHandler(
        publisher=publisher,  # type: ignore[arg-type]
        sessions=sessions,
        reaper=_NoReaper(),  # type: ignore[arg-type]
        metrics=LifecycleMetrics(registry),
        role_of={"worker-x": "worker"}.get,
    )
    env = Envelope.new(kind=Kind.STOP, sender="worker-x", to="B._gateway", spawn_id="w-1", ttl_s=60)
    for attempt in range(2):  # the second is a repeat: refused from the row, stops nothing
        request, decision = _Stop(env, "A", "stop-1"), _Decision()
        with sessions.begin() as s:
            handler._decide(s, request=request, decision=decision)
        handler._after_commit(request, decision)
        assert decision.verdict is (StopVerdict.NOT_PERMITTED if attempt == 0 else None)
    failed = [read_receipt("FAILED", e.body) for e in publisher.staged]
    assert [(f.msg_id, f.reason) for f in failed] == [(env.msg_id, "NOT_PERMITTED")] * 2
    assert "worker-x@A (role worker) may not stop w-1" in failed[0].error
    with sessions() as s:
        assert spawns.get(s, "w-1").state == spawns.LIVE
        rows = [(r.state, r.reason) for r in s.execute(select(stops.stops_table))]
    assert rows == [("refused", "NOT_PERMITTED")]
    value = registry.get_sample_value
    assert value("fleet_lifecycle_stops_total", {"outcome": "not_permitted"}) == 1
    assert value("fleet_lifecycle_stops_total", {"outcome": "repeat"}) == 1
