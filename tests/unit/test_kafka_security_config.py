"""The [kafka] table: secrets never inline and never shown, owned properties refused, and the
one function that puts the login on every client (docs/security.md)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError

from pipeline.bootstrap.client import Factories
from pipeline.errors import ConfigError, SecurityError
from pipeline.host.config import load_config
from pipeline.kafka.errors import as_fleet_error
from pipeline.kafka.refusals import RefusalWatch, refusal_reason, security_error
from pipeline.kafka.security import KafkaSecurity, Secret, security_from_table
from pipeline.kafka.settings import consumer_config, producer_config, with_security
from pipeline.reasons import Config, Security

PASSWORD = "pw-Zq81-never-printed"


def fleet_toml(tmp_path: Path, kafka: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(f'host = "a"\n{kafka}', encoding="utf-8")
    return path


SASL = """
[kafka]
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "a"
ssl_ca_location = "ca.pem"
"""


def test_password_from_a_file_is_read_and_never_shown(tmp_path: Path) -> None:
    secret_file = tmp_path / "a.password"
    secret_file.write_text(PASSWORD + "\n")
    path = fleet_toml(tmp_path, SASL + f'sasl_password_file = "{secret_file}"\n')
    cfg = load_config(path, environ={})
    assert cfg.kafka.sasl_password is not None
    assert cfg.kafka.sasl_password.reveal() == PASSWORD
    assert cfg.kafka.password_source == f"file:{secret_file}"
    shown = [repr(cfg), str(cfg), repr(cfg.kafka), f"{cfg.kafka.sasl_password}", str(cfg.kafka)]
    shown.append(repr(cfg.kafka.describe()))
    assert all(PASSWORD not in text for text in shown)
    assert "***" in repr(cfg.kafka.sasl_password)
    with pytest.raises(TypeError):
        pickle.dumps(cfg.kafka.sasl_password)
    assert copy.deepcopy(cfg).kafka.sasl_password == cfg.kafka.sasl_password


def test_password_from_the_environment(tmp_path: Path) -> None:
    path = fleet_toml(tmp_path, SASL + 'sasl_password_env = "FLEET_KAFKA_PW"\n')
    cfg = load_config(path, environ={"FLEET_KAFKA_PW": PASSWORD})
    assert cfg.kafka.sasl_password == Secret(PASSWORD)
    with pytest.raises(ConfigError) as unset:
        load_config(path, environ={})
    assert unset.value.reason == Security.SECRET_UNREADABLE
    assert "FLEET_KAFKA_PW" in str(unset.value)


def test_an_inline_password_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = fleet_toml(tmp_path, SASL + f'sasl_password = "{PASSWORD}"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert exc.value.reason == Security.SECRET_INLINE
    assert "kafka.sasl_password" in str(exc.value)
    assert PASSWORD not in str(exc.value) and PASSWORD not in repr(exc.value.context)


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("enable.auto.commit", Security.PROPERTY_OWNED),
        ("group.id", Security.PROPERTY_OWNED),
        ("enable.idempotence", Security.PROPERTY_OWNED),
        ("sasl.username", Security.PROPERTY_OWNED),
        ("sasl.password", Security.PROPERTY_OWNED),
        ("ssl.key.password", Security.SECRET_INLINE),
        ("sasl.jaas.config", Security.SECRET_INLINE),
    ],
)
def test_owned_and_secret_properties_are_refused(tmp_path: Path, key: str, reason: str) -> None:
    path = fleet_toml(tmp_path, f'[kafka.properties]\n"{key}" = "{PASSWORD}"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert exc.value.reason == reason
    assert f"kafka.properties.{key}" in str(exc.value)
    assert PASSWORD not in str(exc.value)


def test_pass_through_properties_reach_every_client(tmp_path: Path) -> None:
    path = fleet_toml(
        tmp_path,
        '[kafka.properties]\n"client.rack" = "r1"\n"socket.keepalive.enable" = true\n',
    )
    cfg = load_config(path, environ={})
    for conf in (producer_config("b:1"), consumer_config("b:1", "g")):
        applied = with_security(conf, cfg.kafka)
        assert applied["client.rack"] == "r1"
        assert applied["socket.keepalive.enable"] == "true"
        assert applied["security.protocol"] == "PLAINTEXT"


@pytest.mark.parametrize(
    ("kafka", "reason", "key"),
    [
        ('[kafka]\nsecurity_protocol = "TLS"\n', Config.CONFIG_INVALID, "kafka.security_protocol"),
        ('[kafka]\nsasl_user = "a"\n', Config.CONFIG_UNKNOWN_KEY, "kafka.sasl_user"),
        (SASL, Config.CONFIG_MISSING_KEY, "kafka.sasl_password_file"),
        ('[kafka]\nsasl_username = "a"\n', Config.CONFIG_INVALID, "kafka.sasl_username"),
        (
            '[kafka]\nsecurity_protocol = "SASL_SSL"\nsasl_username = "a"\n',
            Config.CONFIG_INVALID,
            "kafka.sasl_mechanism",
        ),
        (
            '[kafka]\nsecurity_protocol = "SSL"\nssl_certificate_location = "c.pem"\n',
            Config.CONFIG_INVALID,
            "kafka.ssl_key_location",
        ),
        (
            '[kafka]\nssl_ca_location = "ca.pem"\n',
            Config.CONFIG_INVALID,
            "kafka.ssl_ca_location",
        ),
    ],
)
def test_bad_tables_name_the_key(tmp_path: Path, kafka: str, reason: str, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(fleet_toml(tmp_path, kafka), environ={})
    assert exc.value.reason == reason
    assert key in str(exc.value)


def test_a_missing_password_file_is_unreadable(tmp_path: Path) -> None:
    path = fleet_toml(tmp_path, SASL + f'sasl_password_file = "{tmp_path / "none"}"\n')
    with pytest.raises(ConfigError) as exc:
        load_config(path, environ={})
    assert exc.value.reason == Security.SECRET_UNREADABLE


def sasl(password: str = PASSWORD) -> KafkaSecurity:
    return security_from_table(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "a",
            "sasl_password_env": "PW",
            "ssl_ca_location": "/tmp/ca.pem",
        },
        environ={"PW": password},
    )


def test_the_owned_settings_win_and_the_login_is_added() -> None:
    conf = with_security(consumer_config("b:1", "gw.a"), sasl())
    assert conf["enable.auto.commit"] is False and conf["group.id"] == "gw.a"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "a" and conf["sasl.password"] == PASSWORD
    assert conf["ssl.ca.location"] == "/tmp/ca.pem"


def test_secured_factories_apply_the_table_to_producer_consumer_and_admin() -> None:
    seen: list[dict[str, Any]] = []
    factories = Factories(producer=seen.append, consumer=seen.append, admin=seen.append).secured(
        sasl()
    )
    factories.producer(producer_config("b:1"))
    factories.consumer(consumer_config("b:1", "g"))
    factories.admin({"bootstrap.servers": "b:1"})
    assert [c["sasl.username"] for c in seen] == ["a", "a", "a"]
    assert PASSWORD not in repr(factories)
    with pytest.raises(ConfigError):
        factories.secured(sasl("other"))


@pytest.mark.parametrize(
    ("code", "text", "reason"),
    [
        (KafkaError._AUTHENTICATION, "SASL authentication error", Security.AUTH_FAILED),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "bad creds", Security.AUTH_FAILED),
        (KafkaError._SSL, "SSL handshake failed", Security.TLS_FAILED),
        (
            KafkaError._TRANSPORT,
            "SSL handshake failed: certificate verify failed",
            Security.TLS_FAILED,
        ),
        (
            KafkaError._TRANSPORT,
            "Disconnected while requesting ApiVersion: might be caused by incorrect "
            "security.protocol configuration",
            Security.PROTOCOL_MISMATCH,
        ),
        (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            "Topic authorization failed",
            Security.NOT_AUTHORIZED,
        ),
        (KafkaError._TRANSPORT, "Connection refused", None),
    ],
)
def test_refusals_map_to_stable_reasons(code: int, text: str, reason: str | None) -> None:
    assert refusal_reason(KafkaError(code, text)) == reason


def test_not_authorized_names_resource_and_operation_and_is_final() -> None:
    err = security_error(
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"),
        "read",
        resource="fleet.inbox.b",
        security=sasl(),
    )
    assert isinstance(err, SecurityError) and not err.retriable
    assert err.reason == Security.NOT_AUTHORIZED
    assert err.context["resource_type"] == "topic"
    assert err.context["resource"] == "fleet.inbox.b"
    assert err.context["operation"] == "read"
    assert "topic fleet.inbox.b" in str(err)
    general = as_fleet_error(
        KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed"),
        "join gw.b",
    )
    assert general.reason == Security.NOT_AUTHORIZED and not general.retriable


def test_a_refusal_text_never_carries_the_password() -> None:
    err = security_error(
        KafkaError(KafkaError._AUTHENTICATION, f"echo {PASSWORD}"), "connect", security=sasl()
    )
    assert err is not None and PASSWORD not in str(err)


def test_repeated_early_closes_are_a_protocol_mismatch() -> None:
    """A plaintext client on a TLS listener is only told "connection closed" (a log line)."""
    seen: list[str] = []

    class Inner:
        def log(self, level: int, fmt: str, *args: object) -> None:
            seen.append(str(args[-1]))

    watch = RefusalWatch(inner=Inner())
    line = "b:1/bootstrap: Disconnected: connection closed by peer (after 5ms in state APIVERSION_QUERY)"
    for _ in range(RefusalWatch.MISMATCH_AFTER - 1):
        watch.log(6, "%s [%s] %s", "FAIL", "rdkafka#producer-1", line)
    assert watch.first is None
    watch.log(6, "%s [%s] %s", "FAIL", "rdkafka#producer-1", line)
    assert watch.first is not None
    assert refusal_reason(watch.first) == Security.PROTOCOL_MISMATCH
    assert len(seen) == RefusalWatch.MISMATCH_AFTER  # still passed on to the package's log
    watch(KafkaError(KafkaError._AUTHENTICATION, "later"))
    assert refusal_reason(watch.first) == Security.PROTOCOL_MISMATCH  # the first one is kept


def test_an_outage_is_not_a_refusal_and_ends_the_check_at_once() -> None:
    """A broker that is down is the caller's to wait out (wait_out), not a security failure."""

    class DownAdmin:
        def __init__(self, conf: dict[str, Any]) -> None:
            self.error_cb = conf["error_cb"]
            self.polls = 0

        def poll(self, _timeout: float) -> int:
            self.polls += 1
            self.error_cb(
                KafkaError(KafkaError._TRANSPORT, "b:1: Connect failed: Connection refused")
            )
            return 0

        def list_topics(self, timeout: float) -> Any:
            raise AssertionError("not reached: the first poll already saw the outage")

    made: list[DownAdmin] = []

    def admin(conf: dict[str, Any]) -> DownAdmin:
        made.append(DownAdmin(conf))
        return made[-1]

    Factories(admin=admin).check_access("b:1", timeout_s=60)
    assert made[0].polls == 1


def test_a_login_refused_after_start_is_told_once_and_chains_the_clients_callback() -> None:
    """A client that only reconnects meets a rotated password in its ``error_cb``;
    the secured factories' LoginWatch makes the first such refusal one AUTH_FAILED for the
    process's subscribers (the gateway stops on it), and the client's own callback still runs."""
    seen: list[dict[str, Any]] = []
    factories = Factories(producer=seen.append, consumer=seen.append, admin=seen.append).secured(
        sasl()
    )
    own: list[KafkaError] = []
    factories.producer(producer_config("b:1", error_cb=own.append))
    told: list[SecurityError] = []
    factories.on_login_refused(told.append)
    outage = KafkaError(KafkaError._TRANSPORT, "Connection refused")
    refused = KafkaError(KafkaError._AUTHENTICATION, f"SASL authentication error ({PASSWORD})")
    for err in (outage, refused, refused):
        seen[0]["error_cb"](err)
    assert own == [outage, refused, refused]  # the client's callback is chained, unchanged
    (err,) = told
    assert err.reason == Security.AUTH_FAILED and not err.retriable
    assert err.context["principal"] == "User:a" and PASSWORD not in str(err)
    assert "Kafka refused the login User:a after start" in str(err)
    late: list[SecurityError] = []
    factories.on_login_refused(late.append)  # a late subscriber hears it at once
    assert late == [err]
    Factories().on_login_refused(told.append)  # plaintext: nothing to refuse, nothing told
    assert len(told) == 1


def test_a_refused_write_is_a_not_authorized_row_error_naming_topic_and_operation() -> None:
    from pipeline.kafka.produce_errors import permanent_error, permanent_reason

    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
    assert permanent_reason(err) == Security.NOT_AUTHORIZED
    text = permanent_error(err, topic="fleet.inbox.b")
    assert text.startswith("[NOT_AUTHORIZED] write topic fleet.inbox.b: TOPIC_AUTHORIZATION_FAILED")
    assert "fleet acls plan" in text
    too_big = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
    assert permanent_error(too_big, topic="t") == str(too_big)
