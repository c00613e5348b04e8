"""``--command-config`` and ``-X``: a Java client's ``.properties`` file and librdkafka keys become
the same KafkaSecurity the ``[kafka]`` table gives (R-SEC-1: per-gateway logins over TLS);
what librdkafka cannot honour is refused with a stable reason, and a credential never comes
from the command line nor shows in a repr."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.kafka.properties import (
    command_line_properties,
    librdkafka_keys,
    load_properties_file,
    parse_properties,
    with_properties,
)
from pipeline.kafka.security import PLAINTEXT, SaslMechanism, SecurityProtocol
from pipeline.reasons import Config, Security

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
PW = "pa55=w;rd"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_the_properties_syntax_is_javas() -> None:
    text = (
        "# a comment\n! another\n\n"
        "a=1\n  b : two words  \nc three\n"
        "d=first \\\n    second\n"
        "e=tab\\there\\u0041\n"
        "f\\=g=h\n"
        "a=last wins\n"
    )
    assert parse_properties(text) == {
        "a": "last wins",
        "b": "two words  ",
        "c": "three",
        "d": "first second",
        "e": "tab\there" + "A",
        "f=g": "h",
    }


def test_a_console_consumer_scram_file_is_a_scram_login(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "bootstrap.servers=elsewhere:9093\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM} required \\\n  username="alice" \\\n  password="{PW}";\n'
        "ssl.truststore.type=PEM\n"
        "ssl.truststore.location=/etc/kafka/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n"
        "client.id=ops\n",
    )
    sec = load_properties_file(path, environ={})
    assert sec.security_protocol is SecurityProtocol.SASL_SSL
    assert sec.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert (sec.sasl_username, sec.ssl_ca_location) == ("alice", "/etc/kafka/ca.pem")
    assert sec.password_source == f"file:{path}"
    conf = sec.client_properties()
    assert conf["sasl.password"] == PW
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    assert conf["client.id"] == "ops"
    assert "bootstrap.servers" not in conf  # the command line's --bootstrap-server wins
    assert PW not in repr(sec) and PW not in str(sec.describe())


def test_a_plain_login_takes_its_mechanism_from_the_login_module() -> None:
    keys = librdkafka_keys({"sasl.jaas.config": f'{PLAIN} required username="u" password="p";'})
    assert keys == {"sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p"}


def test_librdkafka_keys_in_the_file_work_as_they_are(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=SCRAM-SHA-256\n"
        "sasl.username=bob\nfleet.sasl.password.env=BOB_PW\nsocket.timeout.ms=5000\n",
    )
    sec = load_properties_file(path, environ={"BOB_PW": PW})
    assert sec.sasl_mechanism is SaslMechanism.SCRAM_SHA_256
    assert sec.password_source == "env:BOB_PW"
    assert sec.client_properties()["sasl.password"] == PW
    assert dict(sec.properties) == {"socket.timeout.ms": "5000"}
    with pytest.raises(ConfigError) as unset:
        load_properties_file(path, environ={})
    assert unset.value.reason == Security.SECRET_UNREADABLE


def test_a_pkcs12_keystore_maps_and_its_password_stays_secret(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=ca.pem\n"
        "ssl.keystore.type=PKCS12\nssl.keystore.location=me.p12\nssl.keystore.password=ks-pw\n"
        "ssl.key.password=key-pw\n",
    )
    sec = load_properties_file(path, environ={})
    conf = sec.client_properties()
    assert (conf["ssl.keystore.location"], conf["ssl.keystore.password"]) == ("me.p12", "ks-pw")
    assert conf["ssl.key.password"] == "key-pw"
    assert "ks-pw" not in repr(sec) and "key-pw" not in str(sec.describe())


def test_a_pem_keystore_is_the_client_certificate_and_key() -> None:
    keys = librdkafka_keys({"ssl.keystore.type": "PEM", "ssl.keystore.location": "me.pem"})
    assert keys == {"ssl.certificate.location": "me.pem", "ssl.key.location": "me.pem"}


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"ssl.truststore.location": "trust.jks"}, "ssl.truststore.type"),  # JKS by default
        ({"ssl.truststore.location": "t.p12", "ssl.truststore.type": "PKCS12"},
         "ssl.truststore.type"),
        ({"ssl.keystore.location": "k.jks", "ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({"sasl.jaas.config": "com.sun.security.auth.module."
          'Krb5LoginModule required useKeyTab="true";'}, "sasl.jaas.config"),
        ({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
          'OAuthBearerLoginModule required clientAssertion="x";'}, "sasl.jaas.config"),
        ({"sasl.jaas.config": f'{SCRAM} required username="u" password="p" tokenauth="true";'},
         "sasl.jaas.config"),
        ({"sasl.login.callback.handler.class": "x.Y"}, "sasl.login.callback.handler.class"),
        ({"key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer"},
         "key.deserializer"),
        ({"ssl.enabled.protocols": "TLSv1.3"}, "ssl.enabled.protocols"),
    ],
)  # fmt: skip
def test_what_librdkafka_cannot_honour_is_refused_by_name(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        librdkafka_keys(props, at="c.properties: ")
    assert exc.value.reason == Security.PROPERTY_UNMAPPABLE
    assert exc.value.context["key"] == f"c.properties: {key}"
    assert "p" not in str(exc.value.context.get("value", ""))  # a JAAS line is never shown


def test_a_mechanism_the_login_module_does_not_speak_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        librdkafka_keys(
            {"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{SCRAM} required username="u";'}
        )
    assert exc.value.reason == Config.CONFIG_INVALID


@pytest.mark.parametrize(
    "pair",
    [
        "sasl.password=hunter2",
        "ssl.key.password=hunter2",
        "ssl.keystore.password=hunter2",
        "ssl.truststore.password=hunter2",
        f'sasl.jaas.config={SCRAM} required username="u" password="hunter2";',
    ],
)
def test_a_credential_on_the_command_line_is_refused(pair: str) -> None:
    with pytest.raises(ConfigError) as exc:
        command_line_properties([pair])
    assert exc.value.reason == Security.SECRET_INLINE
    assert "hunter2" not in str(exc.value) and "hunter2" not in str(exc.value.context)


def test_dash_x_adds_librdkafka_keys_over_the_file_and_keeps_its_password(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f'sasl.jaas.config={SCRAM} required username="alice" password="{PW}";\n'
        "ssl.truststore.type=PEM\nssl.truststore.location=ca.pem\nclient.id=a\n",
    )
    extra = command_line_properties(["client.id=b", "client.rack=r1", "sasl.username=carol"])
    sec = with_properties(load_properties_file(path, environ={}), extra, environ={})
    conf = sec.client_properties()
    assert (conf["client.id"], conf["client.rack"], conf["sasl.username"]) == ("b", "r1", "carol")
    assert conf["sasl.password"] == PW and sec.password_source == f"file:{path}"


@pytest.mark.parametrize(
    ("pair", "reason"),
    [
        ("group.id=x", Security.PROPERTY_OWNED),
        ("enable.idempotence=false", Security.PROPERTY_OWNED),
        ("bootstrap.servers=x:1", Security.PROPERTY_OWNED),  # that is -b
        ("client.id", Config.CONFIG_INVALID),  # no "="
    ],
)
def test_dash_x_cannot_change_what_the_ack_model_owns(pair: str, reason: str) -> None:
    with pytest.raises(ConfigError) as exc:
        with_properties(PLAINTEXT, command_line_properties([pair]), environ={})
    assert exc.value.reason == reason


def test_an_unreadable_file_is_config_not_found(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_properties_file(tmp_path / "nope.properties", environ={})
    assert exc.value.reason == Config.CONFIG_NOT_FOUND
