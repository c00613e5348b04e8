"""The fleet rig writes configs from the config types: what it writes loads back equal.

``pipeline.testing.fleet_toml`` names keys by the dataclasses' field names, so a field renamed in
the types is renamed in every rig's files; these round trips (write -> ``load_config``) are what
say the writer and the loader agree, for every kind of value a fleet.toml holds.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pipeline.host.config import load_config
from pipeline.host.entity_config import EntityConfig, InjectorSpec, ProfileConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.security import KafkaSecurity, SaslMechanism, Secret, SecurityProtocol
from pipeline.presence.roles import Delivery, Role
from pipeline.retention.policy import RetentionConfig
from pipeline.testing.fleet_toml import fleet_toml
from pipeline.testing.rig import Rig, trust_store
from pipeline.testing.toml_writer import dumps


def test_the_toml_writer_is_the_inverse_of_tomllib() -> None:
    table: dict[str, Any] = {
        "text": 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é ✓ 🙂',
        "n": -42,
        "big": 10**15,
        "x": 0.1,
        "tiny": 1e-05,
        "huge": 1.5e300,
        "yes": True,
        "no": False,
        "empty": [],
        "mixed": ["a", "b"],
        "numbers": [1, 2.5],
        "nested_list": [[1, 2], ["x"]],
        "top": {"k": "v", "dotted.key": 1, "deeper": {"z": [True]}},
        "rows": [{"a": 1, "sub": {"b": "c"}, "more": [{"c": 2}]}, {"a": 2}],
    }
    assert tomllib.loads(dumps(table)) == table


def test_the_toml_writer_writes_infinities_and_refuses_what_toml_cannot_hold() -> None:
    back = tomllib.loads(dumps({"up": math.inf, "down": -math.inf, "nan": math.nan}))
    assert back["up"] == math.inf and back["down"] == -math.inf and math.isnan(back["nan"])
    with pytest.raises(TypeError, match="no TOML form for NoneType"):
        dumps({"k": None})


def _everything(root: Path) -> GatewayConfig:
    """A config with every kind of field away from its default."""
    password = root / "pw"
    password.write_text("s3cret\n", encoding="utf-8")
    tmux = InjectorSpec(
        type="tmux", pane="w:0.1", idle_pattern=r"\$ $", timeout_s=2.5, socket="fleet"
    )
    return Rig(root=root, bootstrap="127.0.0.1:1,127.0.0.1:2", prefix="rig.").config(
        "A",
        (
            EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL, groups=("g1",)),
            EntityConfig(
                gid="main.b", role=Role.MAIN, delivery=Delivery.PULL, nudge=tmux, groups=("x", "y")
            ),
            EntityConfig(gid="w-1", role=Role.WORKER, delivery=Delivery.INJECT, injector=tmux),
            EntityConfig(
                gid="w-2",
                role=Role.WORKER,
                delivery=Delivery.INJECT,
                injector=InjectorSpec(type="callback", callback="w-2"),
            ),
            EntityConfig(
                gid="w-3",
                role=Role.WORKER,
                delivery=Delivery.INJECT,
                injector=InjectorSpec(type="command", command=("sh", "-c", 'echo "$X" >> a b')),
            ),
        ),
        store_url="sqlite:///stores/<host>.sqlite",
        inject_deadline_s=12,
        inject_burst=3,
        max_held_per_recipient=77,
        clock_skew_s=0,
        presence_interval_s=0.25,
        presence_ttl_s=3.0,
        nudge_max_s=600.0,
        profiles=(
            ProfileConfig(
                name="shell",
                description="a shell",
                launch=("sh", "-c", "echo {gid} {job}"),
                stop=("kill", "{gid}"),
                injector=InjectorSpec(type="command", command=("sh", "-c", "cat >> {gid}.in")),
                groups=("crew",),
                max_live_per_job=2,
            ),
        ),
        retention=RetentionConfig(outbox_sent_s=60.0, batch_rows=10, every_s=0.5),
        kafka=KafkaSecurity(
            security_protocol=SecurityProtocol.SASL_SSL,
            sasl_mechanism=SaslMechanism.SCRAM_SHA_256,
            sasl_username="a",
            sasl_password=Secret("s3cret"),
            password_source=f"file:{password}",
            ssl_ca_location="/ca.pem",
            properties=(("client.rack", "r1"), ("socket.timeout.ms", "5000")),
        ),
        socket_path="",
        socket_mode=0o660,
        pairwise_mac=True,
    )


def test_a_config_the_rig_writes_loads_back_equal(tmp_path: Path) -> None:
    config = _everything(tmp_path)
    path = Rig(root=tmp_path).write_config(config)
    assert path == tmp_path / "A.toml"
    assert load_config(path) == config
    text = path.read_text(encoding="utf-8")
    assert "s3cret" not in text and f'sasl_password_file = "{tmp_path / "pw"}"' in text


def test_a_password_from_the_environment_is_written_as_the_variable_name(tmp_path: Path) -> None:
    login = KafkaSecurity(
        security_protocol=SecurityProtocol.SASL_PLAINTEXT,
        sasl_mechanism=SaslMechanism.PLAIN,
        sasl_username="a",
        sasl_password=Secret("pw"),
        password_source="env:FLEET_PW",
    )
    config = Rig(root=tmp_path).config("A", kafka=login)
    path = Rig(root=tmp_path).write_config(config, tmp_path / "fleet.toml")
    assert load_config(path, environ={"FLEET_PW": "pw"}) == config
    assert 'sasl_password_env = "FLEET_PW"' in path.read_text(encoding="utf-8")


def test_a_password_of_unknown_origin_is_never_written(tmp_path: Path) -> None:
    login = KafkaSecurity(
        security_protocol=SecurityProtocol.SASL_PLAINTEXT,
        sasl_mechanism=SaslMechanism.PLAIN,
        sasl_username="a",
        sasl_password=Secret("pw"),
    )
    with pytest.raises(ValueError, match="password goes into no file"):
        fleet_toml(Rig(root=tmp_path).config("A", kafka=login))


def test_only_values_away_from_their_defaults_are_written(tmp_path: Path) -> None:
    rig = Rig(root=tmp_path)
    config = rig.config("A", key_file=None, trust_dir=None, presence_ttl_s=20.0)
    assert tomllib.loads(fleet_toml(config)) == {"host": "A", "store_url": rig.store_url("A")}


def test_the_rig_writes_keys_its_configs_name_and_a_trust_dir_of_them(tmp_path: Path) -> None:
    rig = Rig(root=tmp_path, bootstrap="127.0.0.1:1", prefix="p.")
    signers = rig.write_keys(("A", "B"))
    config = rig.config("B")
    assert config.key_file == str(tmp_path / "B.key") and Path(config.key_file).exists()
    assert config.trust_dir == str(rig.trust_dir)
    assert sorted(p.name for p in rig.trust_dir.iterdir()) == ["A.pub", "B.pub"]
    assert config.store_url == f"sqlite:///{tmp_path / 'B.sqlite'}"
    assert (config.bootstrap, config.topic_prefix) == ("127.0.0.1:1", "p.")
    assert sorted(trust_store(signers).hosts()) == ["A", "B"]
