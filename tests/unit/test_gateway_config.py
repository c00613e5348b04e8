"""Gateway config: every reason code, with the file, key path and bad value in the message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.errors import ConfigError
from pipeline.host.config import config_from_mapping, env_overrides, load_config
from pipeline.host.config_checks import check_gid
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"

WORKER = """
[[entities]]
gid = "w1"
role = "worker"
delivery = "inject"
[entities.injector]
type = "command"
command = ["cat"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(text, encoding="utf-8")
    return path


def fails(tmp_path: Path, text: str, **kw: Any) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, **kw)
    assert str(path) in str(info.value) or "overrides" in str(info.value)
    return info.value


def test_example_file_loads_with_every_entity_kind() -> None:
    config = load_config(EXAMPLE)
    assert config.host == "A"
    assert config.store_url == "sqlite:///fleet-A.sqlite"
    assert config.key_file == "keys/A.0123456789abcdef.key"  # as `fleet keys init` names it
    kinds = {e.gid: (e.delivery, e.injector and e.injector.type) for e in config.entities}
    assert kinds == {
        "A-main": (Delivery.PULL, None),
        "A-w1": (Delivery.INJECT, "tmux"),
        "A-w2": (Delivery.INJECT, "command"),
        "A-w3": (Delivery.INJECT, "callback"),
    }
    callback = config.entities[3].injector
    assert callback is not None and callback.callback == "A-w3"  # named by gid by default


def test_defaults_and_host_substitution(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'host = "h1"\n'))
    assert config == GatewayConfig(host="h1")
    assert config.store_url == "sqlite:///fleet-h1.sqlite"
    assert (config.bootstrap, config.topic_prefix, config.inject_deadline_s) == (
        "127.0.0.1:9092",
        "fleet.",
        30.0,
    )
    assert config.entities == ()


def test_overrides_replace_top_level_keys_and_none_means_not_given(tmp_path: Path) -> None:
    path = write(tmp_path, 'host = "A"\nbootstrap = "k:1"\n')
    config = load_config(path, overrides={"host": "B", "bootstrap": None})
    assert (config.host, config.bootstrap, config.store_url) == (
        "B",
        "k:1",
        "sqlite:///fleet-B.sqlite",
    )


def test_missing_file_is_config_not_found(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml")
    assert info.value.reason == "CONFIG_NOT_FOUND"
    assert "nope.toml" in str(info.value)


@pytest.mark.parametrize("text", ['host = "A"\nx = [', b"host = '\xff'"])
def test_bad_toml_or_bytes_is_config_syntax(tmp_path: Path, text: str | bytes) -> None:
    path = tmp_path / "bad.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.reason == "CONFIG_SYNTAX"
    assert "bad.toml" in str(info.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('host = "A"\nbootstrapp = "x:1"\n', "bootstrapp"),
        ('host = "A"\n' + WORKER + "colour = 'red'\n", "entities[0].injector.colour"),
        (
            'host = "A"\n[[entities]]\ngid="m"\nrole="main"\ndelivery="pull"\nprio=1\n',
            "entities[0].prio",
        ),
    ],
)
def test_unknown_key_is_an_error_naming_its_path(tmp_path: Path, text: str, key: str) -> None:
    err = fails(tmp_path, text)
    assert err.reason == "CONFIG_UNKNOWN_KEY"
    assert err.context["key"] == key
    assert key in str(err)


def test_unknown_override_is_an_error(tmp_path: Path) -> None:
    err = fails(tmp_path, 'host = "A"\n', overrides={"hots": "B"})
    assert err.reason == "CONFIG_UNKNOWN_KEY"
    assert "overrides.hots" in str(err)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('bootstrap = "x:1"\n', "host"),
        ('host = "A"\n[[entities]]\ngid = "m"\nrole = "main"\n', "entities[0].delivery"),
        (
            'host = "A"\n[[entities]]\ngid="w"\nrole="worker"\ndelivery="inject"\n[entities.injector]\npane="%1"\n',
            "entities[0].injector.type",
        ),
        (
            'host = "A"\n[[entities]]\ngid="w"\nrole="worker"\ndelivery="inject"\n[entities.injector]\ntype="tmux"\n',
            "entities[0].injector.pane",
        ),
        (
            'host = "A"\n[[entities]]\ngid="w"\nrole="worker"\ndelivery="inject"\n[entities.injector]\ntype="command"\n',
            "entities[0].injector.command",
        ),
    ],
)
def test_missing_required_key(tmp_path: Path, text: str, key: str) -> None:
    err = fails(tmp_path, text)
    assert err.reason == "CONFIG_MISSING_KEY"
    assert err.context["key"] == key
    assert key in str(err)


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("inject_deadline_s = 0", "inject_deadline_s", 0),
        ("inject_deadline_s = 'soon'", "inject_deadline_s", "soon"),
        ("max_held_per_recipient = 1.5", "max_held_per_recipient", 1.5),
        ("inject_burst = 0", "inject_burst", 0),
        ("inject_burst = 2.5", "inject_burst", 2.5),
        ("inject_burst = true", "inject_burst", True),
        ("max_held_per_recipient = true", "max_held_per_recipient", True),
        ("clock_skew_s = -1", "clock_skew_s", -1),
        ("presence_ttl_s = 5.0", "presence_ttl_s", 5.0),  # not above the 5 s interval
        ("bootstrap = 'localhost'", "bootstrap", "localhost"),
        ("topic_prefix = 'fleet/'", "topic_prefix", "fleet/"),
        ("store_url = ''", "store_url", ""),
        ("key_file = 7", "key_file", 7),
        ("entities = 'w1'", "entities", "w1"),
    ],
)
def test_invalid_top_level_values(tmp_path: Path, line: str, key: str, value: Any) -> None:
    err = fails(tmp_path, f'host = "A"\n{line}\n')
    assert err.reason == "CONFIG_INVALID"
    assert (err.context["key"], err.context["value"]) == (key, value)
    assert f"{key} = {value!r}" in str(err)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('role = "worker"', 'role = "boss"', "entities[0].role"),
        ('delivery = "inject"', 'delivery = "push"', "entities[0].delivery"),
        ('type = "command"', 'type = "ssh"', "entities[0].injector.type"),
        ('command = ["cat"]', 'command = "cat"', "entities[0].injector.command"),
        ('command = ["cat"]', 'command = ["cat"]\ntimeout_s = 0', "entities[0].injector.timeout_s"),
        ('command = ["cat"]', 'command = ["cat"]\npane = "%1"', "entities[0].injector.pane"),
        ('delivery = "inject"', 'delivery = "inject"\ngroups = ["a", "a"]', "entities[0].groups"),
    ],
)
def test_invalid_entity_values(tmp_path: Path, old: str, new: str, key: str) -> None:
    err = fails(tmp_path, 'host = "A"\n' + WORKER.replace(old, new))
    assert err.reason == "CONFIG_INVALID"
    assert err.context["key"] == key
    assert key in str(err)


def test_bad_idle_pattern_regex(tmp_path: Path) -> None:
    text = 'host = "A"\n' + WORKER.replace(
        'type = "command"\ncommand = ["cat"]', 'type = "tmux"\npane = "%1"\nidle_pattern = "(["'
    )
    err = fails(tmp_path, text)
    assert (err.reason, err.context["key"]) == (
        "CONFIG_INVALID",
        "entities[0].injector.idle_pattern",
    )


def test_pull_entity_with_injector_is_invalid(tmp_path: Path) -> None:
    err = fails(tmp_path, 'host = "A"\n' + WORKER.replace('"inject"', '"pull"'))
    assert (err.reason, err.context["key"]) == ("CONFIG_INVALID", "entities[0].injector")


def test_duplicate_gid(tmp_path: Path) -> None:
    err = fails(tmp_path, 'host = "A"\n' + WORKER + WORKER)
    assert err.reason == "CONFIG_DUPLICATE_GID"
    assert err.context["key"] == "entities[1].gid"
    assert "'w1'" in str(err)


def test_inject_without_injector(tmp_path: Path) -> None:
    err = fails(
        tmp_path, 'host = "A"\n[[entities]]\ngid = "w"\nrole = "worker"\ndelivery = "inject"\n'
    )
    assert err.reason == "CONFIG_MISSING_INJECTOR"
    assert err.context["key"] == "entities[0].injector"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('host = "A.B"\n', "host"),
        ('host = "A"\n' + WORKER.replace('gid = "w1"', 'gid = "w 1"'), "entities[0].gid"),
        (
            'host = "A"\n' + WORKER.replace('"inject"', '"inject"\ngroups = ["ok", "no!"]'),
            "entities[0].groups[1]",
        ),
        (
            'host = "A"\n'
            + WORKER.replace('command = ["cat"]', 'command = ["cat"]').replace(
                'type = "command"\ncommand = ["cat"]', 'type = "tmux"\npane = "%1"\nsocket = "a/b"'
            ),
            "entities[0].injector.socket",
        ),
    ],
)
def test_invalid_names(tmp_path: Path, text: str, key: str) -> None:
    err = fails(tmp_path, text)
    assert err.reason == "INVALID_NAME"
    assert err.context["key"] == key


@pytest.mark.parametrize(
    "gid", ["A._gateway", "broadcast.all", ".x", "x.", "a..b", "", "x" * 129, 5]
)
def test_gid_rejects_reserved_and_unsafe_forms(gid: Any) -> None:
    with pytest.raises(ConfigError) as info:
        check_gid(gid)
    assert info.value.reason == "INVALID_NAME"


@pytest.mark.parametrize("gid", ["A.main", "w-1", "host_2.worker.3", "x" * 128])
def test_gid_accepts_safe_forms(gid: str) -> None:
    assert check_gid(gid) == gid


def test_code_built_config_is_validated_the_same_way() -> None:
    with pytest.raises(ConfigError) as info:
        EntityConfig(gid="w", role=Role.WORKER, delivery=Delivery.INJECT)
    assert info.value.reason == "CONFIG_MISSING_INJECTOR"
    spec = InjectorSpec(type="command", command=("cat",))
    entity = EntityConfig(gid="w", role=Role.WORKER, delivery=Delivery.INJECT, injector=spec)
    with pytest.raises(ConfigError) as dup:
        GatewayConfig(host="A", entities=(entity, entity))
    assert dup.value.reason == "CONFIG_DUPLICATE_GID"


def test_config_from_mapping_matches_the_file_loader() -> None:
    config = config_from_mapping(
        {"host": "A", "entities": [{"gid": "m", "role": "main", "delivery": "pull"}]}
    )
    assert config.entities == (EntityConfig(gid="m", role=Role.MAIN, delivery=Delivery.PULL),)


def test_idle_pattern_may_end_in_a_space_but_not_be_empty() -> None:
    assert InjectorSpec(type="tmux", pane="%1", idle_pattern="> ").idle_pattern == "> "
    with pytest.raises(ConfigError) as info:
        InjectorSpec(type="tmux", pane="%1", idle_pattern="")
    assert (info.value.reason, info.value.context["key"]) == ("CONFIG_INVALID", "idle_pattern")


def test_role_and_delivery_are_defined_once_and_the_host_entry_values_are_refused() -> None:
    """Role/Delivery live in presence.model; a local entity may not claim the host entry's
    ``gateway`` role or ``none`` delivery."""
    from pipeline.errors import ConfigError
    from pipeline.host import entity_config as config
    from pipeline.presence import model

    assert config.Role is model.Role and config.Delivery is model.Delivery
    for role, delivery in (
        (model.Role.GATEWAY, model.Delivery.PULL),
        (model.Role.MAIN, model.Delivery.NONE),
    ):
        with pytest.raises(ConfigError):
            config.EntityConfig(gid="x", role=role, delivery=delivery)


def test_wal_checkpoint_is_a_config_key_the_thread_by_default() -> None:
    """docs/store.md "SQLite: the WAL checkpointed off the writers' path": the operator's choice."""
    assert GatewayConfig(host="h").background_checkpoint
    writers = config_from_mapping({"host": "h", "wal_checkpoint": "writers"})
    assert writers.wal_checkpoint == "writers" and not writers.background_checkpoint
    assert env_overrides({"FLEET_WAL_CHECKPOINT": "writers"}) == {"wal_checkpoint": "writers"}
    with pytest.raises(ConfigError) as info:
        GatewayConfig(host="h", wal_checkpoint="sometimes")
    assert info.value.reason == "CONFIG_INVALID"
    assert "wal_checkpoint" in str(info.value) and '"writers"' in str(info.value)
