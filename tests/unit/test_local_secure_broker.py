"""The secured local broker's files: a CA that signs the broker, private files 0600, salted SCRAM
credentials (no password on a command line), and a [kafka] table per login that loads."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from pipeline.errors import ConfigError
from pipeline.host.config import load_config
from pipeline.kafka.local.secure import ADMIN, BROKER_PRINCIPAL, SecureBroker, scram_credential


@pytest.fixture
def broker(tmp_path: Path) -> SecureBroker:
    return SecureBroker.create(tmp_path / "secure", ("a", "b"))


def test_the_ca_signs_a_broker_cert_for_loopback(broker: SecureBroker) -> None:
    ca = x509.load_pem_x509_certificate(broker.ca.read_bytes())
    chain = x509.load_pem_x509_certificates((broker.folder / "broker.pem").read_bytes())
    cert = chain[0]
    assert cert.issuer == ca.subject
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.subject.rfc4514_string() == f"CN={BROKER_PRINCIPAL}"
    assert b"PRIVATE KEY" in (broker.folder / "broker.pem").read_bytes()
    assert b"PRIVATE KEY" not in broker.ca.read_bytes()


def test_keys_and_passwords_are_owner_only(broker: SecureBroker) -> None:
    private = [broker.folder / "broker.pem", broker.folder / "ca.key.pem"]
    private += [broker.password_file(u) for u in (ADMIN, "a", "b")]
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    passwords = {broker.password(u).reveal() for u in (ADMIN, "a", "b")}
    assert len(passwords) == 3 and all(len(p) >= 24 for p in passwords)


def test_scram_args_carry_salted_credentials_only(broker: SecureBroker) -> None:
    args = broker.scram_args()
    assert args.count("--add-scram") == 3
    joined = " ".join(args)
    assert "name=admin," in joined and "name=a," in joined and "name=b," in joined
    assert all(broker.password(u).reveal() not in joined for u in broker.users)


def test_scram_credential_is_pbkdf2_sha512() -> None:
    salt_b64, salted_b64 = scram_credential("pw", iterations=4096)
    expected = hashlib.pbkdf2_hmac("sha512", b"pw", base64.b64decode(salt_b64), 4096)
    assert base64.b64decode(salted_b64) == expected


def test_each_login_gets_a_kafka_table_that_loads(broker: SecureBroker, tmp_path: Path) -> None:
    broker.write_client_files("127.0.0.1:1")
    table = (broker.folder / "a.kafka.toml").read_text()
    assert broker.password("a").reveal() not in table
    path = tmp_path / "fleet.toml"
    path.write_text('host = "a"\n' + table)
    cfg = load_config(path, environ={})
    assert cfg.kafka == broker.security("a")
    assert SecureBroker.load(broker.folder).users == (ADMIN, "a", "b")


def test_node_properties_enforce_acls_and_keep_the_controller_mtls(broker: SecureBroker) -> None:
    props = broker.node_properties(9093, 9094)
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:9093"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == f"User:{ADMIN};User:{BROKER_PRINCIPAL}"
    assert "PLAINTEXT" not in props["listeners"]


def test_admin_is_not_a_host_login(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        SecureBroker.create(tmp_path, ("admin",))
