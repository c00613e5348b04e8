"""Mutual TLS and OAUTHBEARER/OIDC logins (docs/security.md): the [kafka] table and the Java
properties take them with their secrets by file or variable only; refusals are classified so
that a refused certificate or token is AUTH_FAILED and an unreachable issuer is not; ``fleet
acls plan`` names a certificate's mapped principal or a token's sub."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.errors import ConfigError
from pipeline.kafka.local.client_certs import MAPPING_RULES, issue_client, new_ca
from pipeline.kafka.principals import map_certificate, map_dn
from pipeline.kafka.properties import (
    command_line_properties,
    librdkafka_keys,
    parse_properties,
    security_from_properties,
)
from pipeline.kafka.refusals import refusal_reason, security_error
from pipeline.kafka.security import KafkaSecurity, security_from_table
from pipeline.reasons import Config, Security
from pipeline.testing.fleet_toml import _kafka_table
from pipeline.testing.oidc_issuer import OidcIssuer

SECRET = "client-secret-Qx7-never-printed"


def oauth_table(secret_file: Path, **extra: Any) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauthbearer_client_secret_file": str(secret_file),
        "properties": {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "fleet-a",
            "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
            "sasl.oauthbearer.scope": "kafka",
        },
        **extra,
    }


def test_an_oauth_login_takes_the_oidc_properties_and_the_secret_from_a_file(
    tmp_path: Path,
) -> None:
    secret_file = tmp_path / "a.secret"
    secret_file.write_text(SECRET + "\n")
    security = security_from_table(oauth_table(secret_file), environ={})
    conf = security.client_properties()
    assert conf["sasl.mechanism"] == "OAUTHBEARER"
    assert conf["sasl.oauthbearer.client.secret"] == SECRET
    assert conf["sasl.oauthbearer.method"] == "oidc"
    assert "sasl.username" not in conf and "sasl.password" not in conf
    assert security.principal_hint() == "OAuth client fleet-a"
    assert all(SECRET not in text for text in (repr(security), str(security.describe())))
    # written back as a file reference, never the secret
    table = _kafka_table(security)
    assert table["sasl_oauthbearer_client_secret_file"] == str(secret_file)
    assert SECRET not in json.dumps(table)


def test_an_oauth_secret_from_the_environment(tmp_path: Path) -> None:
    table = oauth_table(tmp_path / "unused")
    del table["sasl_oauthbearer_client_secret_file"]
    table["sasl_oauthbearer_client_secret_env"] = "FLEET_OAUTH_SECRET"
    security = security_from_table(table, environ={"FLEET_OAUTH_SECRET": SECRET})
    assert security.client_properties()["sasl.oauthbearer.client.secret"] == SECRET
    with pytest.raises(ConfigError) as exc:
        security_from_table(table, environ={})
    assert exc.value.reason == Security.SECRET_UNREADABLE


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"properties": {"sasl.oauthbearer.client.secret": SECRET}}, Security.SECRET_INLINE),
        ({"sasl_oauthbearer_client_secret_file": None}, Config.CONFIG_MISSING_KEY),
        ({"sasl_username": "a"}, Config.CONFIG_INVALID),
    ],
)
def test_an_oauth_login_is_refused_without_its_secret_or_with_it_inline(
    tmp_path: Path, change: dict[str, Any], reason: str
) -> None:
    secret_file = tmp_path / "a.secret"
    secret_file.write_text(SECRET)
    table = oauth_table(secret_file)
    for key, value in change.items():
        if key == "properties":
            table["properties"] = {**table["properties"], **value}
        elif value is None:
            del table[key]
        else:
            table[key] = value
    with pytest.raises(ConfigError) as exc:
        security_from_table(table, environ={})
    assert exc.value.reason == reason
    assert SECRET not in str(exc.value)


def test_the_oidc_properties_need_oauthbearer() -> None:
    with pytest.raises(ConfigError):
        KafkaSecurity(properties=(("sasl.oauthbearer.client.id", "x"),))


def test_a_client_certificate_with_its_key_password_from_a_file(tmp_path: Path) -> None:
    cert, key, password = issue_client(tmp_path, "gateway-a", new_ca("test CA"))
    table = {
        "security_protocol": "SSL",
        "ssl_ca_location": "ca.pem",
        "ssl_certificate_location": str(cert),
        "ssl_key_location": str(key),
        "ssl_key_password_file": str(password),
    }
    security = security_from_table(table, environ={})
    key_password = password.read_text().strip()
    assert security.client_properties()["ssl.key.password"] == key_password
    assert security.principal_hint() == f"the client certificate {cert}"
    assert key_password not in repr(security) and key_password not in str(security.describe())
    assert _kafka_table(security)["ssl_key_password_file"] == str(password)


def test_java_oauth_properties_become_librdkafka_oidc(tmp_path: Path) -> None:
    """A client.properties written for the Java client's OIDC login."""
    props = parse_properties(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginCallbackHandler\n"
        "sasl.oauthbearer.token.endpoint.url=https://idp.example/token\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        f'required clientId="fleet-a" clientSecret="{SECRET}" scope="kafka";\n'
    )
    keys = librdkafka_keys(props)
    security = security_from_properties(keys, environ={}, source="c.properties")
    conf = security.client_properties()
    assert conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["sasl.oauthbearer.client.id"] == "fleet-a"
    assert conf["sasl.oauthbearer.scope"] == "kafka"
    assert conf["sasl.oauthbearer.client.secret"] == SECRET
    assert SECRET not in repr(security)


def test_a_secret_named_by_a_fleet_property_and_never_on_the_command_line() -> None:
    keys = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "fleet-a",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "fleet.sasl.oauthbearer.client.secret.env": "S",
    }
    security = security_from_properties(keys, environ={"S": SECRET}, source="-X")
    assert dict(security.secret_sources)["sasl.oauthbearer.client.secret"] == "env:S"
    with pytest.raises(ConfigError) as exc:
        command_line_properties([f"sasl.oauthbearer.client.secret={SECRET}"])
    assert exc.value.reason == Security.SECRET_INLINE
    assert SECRET not in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        command_line_properties([f"ssl.key.password={SECRET}"])
    assert exc.value.reason == Security.SECRET_INLINE


@pytest.mark.parametrize(
    ("code", "text", "reason"),
    [
        # the broker refused our certificate (mutual TLS): the login is refused
        (KafkaError._SSL, "SSL handshake failed: sslv3 alert certificate unknown", "AUTH_FAILED"),
        (KafkaError._TRANSPORT, "ssl/tls alert bad certificate", "AUTH_FAILED"),
        (KafkaError._SSL, "tlsv13 alert certificate required", "AUTH_FAILED"),
        # we refused the broker's certificate: TLS_FAILED as before
        (KafkaError._SSL, "SSL handshake failed: certificate verify failed", "TLS_FAILED"),
        # the issuer refused the client, the broker refused the token
        (KafkaError._AUTHENTICATION,
         'Failed to acquire SASL OAUTHBEARER token: {"error": "invalid_client"}', "AUTH_FAILED"),
        (KafkaError._AUTHENTICATION,
         'SASL authentication error: {"status":"invalid_token"}', "AUTH_FAILED"),
        # the issuer did not answer: an outage, not a refusal
        (KafkaError._AUTHENTICATION, "Failed to acquire SASL OAUTHBEARER token: Failed to "
         "connect to 127.0.0.1:1 after 0 ms: Could not connect to server", None),
        # a re-authentication that met a request in flight; a handshake cut locally
        (KafkaError._AUTHENTICATION, "SASL OAUTHBEARER mechanism handshake failed: Broker: "
         "Request not valid in current SASL state: broker's supported mechanisms: ", None),
        (KafkaError._AUTHENTICATION, "SASL OAUTHBEARER mechanism handshake failed: Local: "
         "Broker transport failure: broker's supported mechanisms: (n/a)", None),
        # a mechanism the broker does not enable is still refused
        (KafkaError._AUTHENTICATION, "SASL PLAIN mechanism handshake failed: Broker: "
         "Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512", "AUTH_FAILED"),
    ],
)  # fmt: skip
def test_refusals_of_certificates_and_tokens(code: int, text: str, reason: str | None) -> None:
    assert refusal_reason(KafkaError(code, text)) == reason


def test_a_refused_certificate_names_the_certificate_not_a_password(tmp_path: Path) -> None:
    cert, key, password = issue_client(tmp_path, "gateway-a", new_ca("test CA"))
    security = security_from_table(
        {
            "security_protocol": "SSL",
            "ssl_certificate_location": str(cert),
            "ssl_key_location": str(key),
            "ssl_key_password_file": str(password),
        },
        environ={},
    )
    err = KafkaError(KafkaError._SSL, "ssl/tls alert certificate unknown")
    error = security_error(err, "connecting to Kafka", security=security)
    assert error is not None and error.reason == Security.AUTH_FAILED
    assert "client certificate" in str(error)


@pytest.mark.parametrize(
    ("dn", "rules", "name"),
    [
        ("CN=gateway-a,OU=fleet-clients,O=fleet-pipeline local", MAPPING_RULES, "gateway-a"),
        ("CN=fleet-broker", MAPPING_RULES, "fleet-broker"),
        ("CN=x,OU=other,O=y", MAPPING_RULES, "CN=x,OU=other,O=y"),  # DEFAULT: the DN
        ("CN=Gateway-A,OU=ops", "RULE:^CN=(.*?),OU=ops$/$1/L", "gateway-a"),
        ("CN=Gateway-A,OU=ops", "RULE:^CN=(.*?),OU=ops$/$1/U,DEFAULT", "GATEWAY-A"),
    ],
)
def test_a_certificate_dn_is_mapped_as_kafka_maps_it(dn: str, rules: str, name: str) -> None:
    assert map_dn(dn, rules) == name


def test_no_matching_rule_without_default_is_refused() -> None:
    with pytest.raises(ConfigError):
        map_dn("CN=x,OU=other", "RULE:^CN=(.*?),OU=ops$/$1/")


def test_acls_plan_for_a_certificate_and_for_a_token_sub(tmp_path: Path) -> None:
    cert, _, _ = issue_client(tmp_path, "gateway-a", new_ca("test CA"))
    assert map_certificate(cert, MAPPING_RULES) == "User:gateway-a"
    base = ["acls", "plan", "--host", "a", "--prefix", "p.", "--json"]
    by_cert = CliRunner().invoke(
        app, [*base, "--cert", str(cert), "--mapping-rules", MAPPING_RULES]
    )
    assert by_cert.exit_code == 0, by_cert.output
    grants = json.loads(by_cert.stdout)
    assert {g["principal"] for g in grants} == {"User:gateway-a"}
    assert {"name": "p.inbox.a", "operation": "READ"}.items() <= grants[0].items()
    by_sub = CliRunner().invoke(app, [*base, "--principal", "User:3f9c-sub"])
    assert {g["principal"] for g in json.loads(by_sub.stdout)} == {"User:3f9c-sub"}
    scram = CliRunner().invoke(app, base)
    assert {g["principal"] for g in json.loads(scram.stdout)} == {"User:a"}
    both = CliRunner().invoke(app, [*base, "--principal", "User:x", "--cert", str(cert)])
    assert both.exit_code == 2
    bad = CliRunner().invoke(app, [*base, "--principal", "Group:x"])
    assert bad.exit_code != 0


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_the_test_issuer_gives_verifiable_rs256_tokens_and_refuses_unknown_clients() -> None:
    issuer = OidcIssuer(audience="fleet-kafka", lifetime_s=5).start()
    try:
        client = issuer.register("fleet-a", subject="svc-a")
        with urllib.request.urlopen(f"{issuer.url}/.well-known/openid-configuration") as r:
            meta = json.load(r)
        assert (meta["token_endpoint"], meta["jwks_uri"]) == (issuer.token_url, issuer.jwks_url)
        auth = base64.b64encode(f"fleet-a:{client.secret}".encode()).decode()
        request = urllib.request.Request(
            issuer.token_url,
            data=b"grant_type=client_credentials&scope=kafka",
            headers={"Authorization": f"Basic {auth}"},
        )
        with urllib.request.urlopen(request) as r:
            token = json.load(r)["access_token"]
        header, claims, signature = token.split(".")
        body = json.loads(_b64(claims))
        assert (body["sub"], body["aud"], body["scope"]) == ("svc-a", "fleet-kafka", "kafka")
        assert body["exp"] - body["iat"] == 5
        with urllib.request.urlopen(issuer.jwks_url) as r:
            (jwk,) = json.load(r)["keys"]
        public = rsa.RSAPublicNumbers(
            int.from_bytes(_b64(jwk["e"]), "big"), int.from_bytes(_b64(jwk["n"]), "big")
        ).public_key()
        public.verify(
            _b64(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
        )  # raises if the JWS does not verify
        issuer.refuse("fleet-a")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(request)
        exc.value.close()  # the error holds the response open
        assert exc.value.code == 401
        assert issuer.issued["fleet-a"] == 1
    finally:
        issuer.stop()
