"""``[[profiles]]`` in fleet.toml: strict keys, templates, caps (R-SPAWN-4, R-SPAWN-5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.host.config import load_config

BASE = 'host = "B"\n'
PROFILE = """
[[profiles]]
name = "shell"
description = "a shell worker"
launch = ["sh", "-c", "echo {gid} {job} >> /tmp/marker"]
max_live_per_job = 2
[profiles.injector]
type = "command"
command = ["sh", "-c", "cat >> /tmp/{gid}.in"]
"""


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "fleet.toml"
    path.write_text(BASE + text, encoding="utf-8")
    return load_config(path)


def test_a_profile_loads_with_its_templates_and_caps(tmp_path: Path) -> None:
    cfg = _load(tmp_path, PROFILE)
    (p,) = cfg.profiles  # type: ignore[attr-defined]
    assert p.name == "shell" and p.launch[2].endswith("/tmp/marker")
    assert p.injector.type == "command" and p.injector.command[2] == "cat >> /tmp/{gid}.in"
    assert (p.max_live_per_parent, p.max_live_per_job, p.max_spawns_per_job) == (8, 2, 64)


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        (("max_live_per_job = 2", "max_live_per_jobs = 2"), "profiles[0].max_live_per_jobs",
         "CONFIG_UNKNOWN_KEY"),
        (("echo {gid}", "echo {pid}"), "profiles[0].launch[2]", "CONFIG_INVALID"),
        (("max_live_per_job = 2", "max_live_per_job = 0"), "profiles[0].max_live_per_job",
         "CONFIG_INVALID"),
        (('type = "command"', 'type = "command"\npane = "x"'), "profiles[0].injector.pane",
         "CONFIG_INVALID"),
        (('name = "shell"', 'name = "a b"'), "profiles[0].name", "INVALID_NAME"),
    ],
)  # fmt: skip
def test_bad_profiles_name_the_key_path(
    tmp_path: Path, change: tuple[str, str], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, PROFILE.replace(*change))
    assert err.value.reason == reason
    assert key in str(err.value) and "fleet.toml" in str(err.value)


def test_a_profile_without_launch_or_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(
            tmp_path,
            PROFILE.replace('launch = ["sh", "-c", "echo {gid} {job} >> /tmp/marker"]', ""),
        )
    assert err.value.reason == "CONFIG_MISSING_KEY" and "profiles[0].launch" in str(err.value)
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, PROFILE + PROFILE)
    assert "profiles[1].name" in str(err.value)
