"""``FLEET_<KEY>`` environment variables override fleet.toml's scalar top-level keys, under the
command line's overrides (docs/configuration.md "Environment overrides"): what a container or a
systemd unit sets without editing the file. The config stays a frozen value built at the edge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.host.config import env_name, env_overrides, load_config, overridable_keys
from pipeline.reasons import Config

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text('host = "A"\nbootstrap = "file:9092"\ninject_burst = 8\n')
    return path


def test_the_environment_overrides_the_file_and_the_command_line_the_environment(
    tmp_path: Path,
) -> None:
    env = {
        "FLEET_BOOTSTRAP": "env:9092",
        "FLEET_STORE_URL": "sqlite:///env-<host>.sqlite",
        "FLEET_INJECT_BURST": "3",
        "FLEET_CLOCK_SKEW_S": "2.5",
        "FLEET_PAIRWISE_MAC": "true",
        "FLEET_SOCKET_MODE": "0o660",
        "FLEET_KEY_FILE": "",  # empty: not set
        "FLEET_KAFKA": "ignored",  # a table: never from the environment
    }
    cfg = load_config(_file(tmp_path), environ=env)
    assert (cfg.bootstrap, cfg.store_url, cfg.inject_burst) == (
        "env:9092",
        "sqlite:///env-A.sqlite",
        3,
    )
    assert (cfg.clock_skew_s, cfg.pairwise_mac, cfg.socket_mode, cfg.key_file) == (
        2.5, True, 0o660, None)  # fmt: skip
    given = load_config(_file(tmp_path), overrides={"bootstrap": "cli:9092"}, environ=env)
    assert given.bootstrap == "cli:9092"
    assert load_config(_file(tmp_path), environ={}).bootstrap == "file:9092"


@pytest.mark.parametrize(
    ("name", "value"),
    [("FLEET_INJECT_BURST", "many"), ("FLEET_PAIRWISE_MAC", "maybe"), ("FLEET_MAX_TTL_S", "x")],
)
def test_a_bad_value_names_the_variable(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_file(tmp_path), environ={name: value})
    assert exc.value.reason == Config.CONFIG_INVALID
    assert name in str(exc.value) and "environment" in str(exc.value)


def test_a_value_the_config_refuses_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_file(tmp_path), environ={"FLEET_INJECT_BURST": "0"})
    assert "environment FLEET_INJECT_BURST" in str(exc.value)


def test_only_the_scalar_keys_are_overridable() -> None:
    keys = overridable_keys()
    assert {"host", "bootstrap", "store_url", "socket_mode", "pairwise_mac"} <= set(keys)
    assert not {"entities", "profiles", "retention", "kafka"} & set(keys)
    assert env_overrides({"FLEET_ENTITIES": "[]"}) == {}


def test_the_docs_list_every_variable() -> None:
    text = (DOCS / "configuration.md").read_text()
    section = text.split("## Environment overrides", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(FLEET_[A-Z_]+)` \| `([a-z_]+)` \|$", section, re.M)
    assert sorted(listed) == sorted((env_name(k), k) for k in overridable_keys())


def test_the_inbox_commit_is_pipelined_on_sqlite_by_default_and_as_set_otherwise(
    tmp_path: Path,
) -> None:
    """``pipelined_commit`` unset: pipelined on SQLite, the inbox waiting on PostgreSQL (where
    a pipelined inbox's smaller batches cost a transaction each, docs/performance.md); set, in
    the file or as ``FLEET_PIPELINED_COMMIT``, it decides on either store."""
    pg = {"FLEET_STORE_URL": "postgresql+psycopg://u@localhost/fleet"}
    assert load_config(_file(tmp_path), environ={}).pipelines_commit is True
    assert load_config(_file(tmp_path), environ=pg).pipelines_commit is False
    on = {**pg, "FLEET_PIPELINED_COMMIT": "true"}
    assert load_config(_file(tmp_path), environ=on).pipelines_commit is True
    off = {"FLEET_PIPELINED_COMMIT": "false"}
    assert load_config(_file(tmp_path), environ=off).pipelines_commit is False
    path = tmp_path / "bad.toml"
    path.write_text('host = "A"\nbootstrap = "f:9092"\npipelined_commit = "yes"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert "pipelined_commit" in str(exc.value) and "true or false" in str(exc.value)
