"""The chaos catalogue (issue 12): every scenario has one catalogue number and a fault it can
play; the broker-side ones run on their own brokers, never on a shared one."""

from __future__ import annotations

from pathlib import Path

from pipeline.chaos.catalogue import SCENARIOS
from pipeline.chaos.cluster_faults import set_bootstrap, skew_env
from pipeline.chaos.nemesis import _ACTIONS


def test_each_number_once_each_fault_playable_broker_faults_on_own_brokers() -> None:
    numbers = [s.number for s in SCENARIOS.values()]
    assert len(numbers) == len(set(numbers)) and numbers == sorted(numbers)
    for s in SCENARIOS.values():
        assert s.action is not None or s.fault in _ACTIONS, s.name
        if s.nodes == 3 or s.broker is not None:
            assert s.own_broker, f"{s.name} breaks brokers: it must start its own"
    assert {7, 9, 11, 12, 13, 14, 16, 18} <= set(numbers)
    assert SCENARIOS["rolling-restart"].strict


def test_the_cut_off_gateway_is_pointed_at_the_proxy_and_only_it(tmp_path: Path) -> None:
    cfg = tmp_path / "B.toml"
    cfg.write_text('host = "B"\nbootstrap = "127.0.0.1:1"\nbootstrap_note = "x"\n')
    set_bootstrap(cfg, "127.0.0.1:2")
    assert cfg.read_text() == 'host = "B"\nbootstrap = "127.0.0.1:2"\nbootstrap_note = "x"\n'


def test_the_skewed_gateway_fakes_wall_time_only_and_gets_the_sleep_shim(tmp_path: Path) -> None:
    env = skew_env(tmp_path, -45.4)
    assert env["FAKETIME"] == "-45" and env["FAKETIME_DONT_FAKE_MONOTONIC"] == "1"
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path)
