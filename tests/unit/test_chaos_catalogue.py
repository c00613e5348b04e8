"""The chaos catalogue: every scenario has one catalogue number and a fault it can
play; the broker-side ones run on their own brokers, never on a shared one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline.chaos.catalogue import SCENARIOS
from pipeline.chaos.client_cut import set_bootstrap
from pipeline.chaos.nemesis import _ACTIONS
from pipeline.chaos.skewed_clock import skew_env, write_skew_shim


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


def test_the_skewed_gateway_sees_its_wall_clock_offset_and_nothing_else(tmp_path: Path) -> None:
    """The shim moves time.time/time.time_ns (every wall-clock reading of the fleet) and
    leaves the monotonic clock alone, as on a host whose NTP is off."""
    shim = write_skew_shim(tmp_path)
    env = skew_env(shim, -45.4)
    assert env["PYTHONPATH"].split(":")[0] == str(shim) and "LD_PRELOAD" not in env
    probe = (
        "import time; from pipeline.support.clock import now_ms; "
        "print(time.time(), now_ms(), time.monotonic())"
    )
    before = time.time()
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env},
                         capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    wall, ms, mono = (float(v) for v in out.stdout.split())
    after = time.time()
    assert before - 45.4 <= wall <= after - 45.4
    assert before - 45.4 <= ms / 1000 <= after - 45.4 + 0.001
    assert abs(mono - time.monotonic()) < after - before + 1, "monotonic is not moved"
