"""``fleet kafka up --secure``: a SASL_SSL (SCRAM-SHA-512) broker with locally made TLS files.

What a secured local cluster is made of (``docs/security.md``)::

    <dir>/secure/ca.pem                 the CA clients trust (ssl_ca_location)
    <dir>/secure/ca.key.pem             the CA's key (0600; only `up` uses it)
    <dir>/secure/broker.pem             the brokers' PEM keystore: key + cert for 127.0.0.1 and
                                        localhost, signed by the CA (0600)
    <dir>/secure/logins/<user>.password one SCRAM-SHA-512 login per host, and `admin` (0600)
    <dir>/secure/client.json            what a client needs: bootstrap, protocol, mechanism,
                                        CA path, the password file of each login
    <dir>/secure/<user>.kafka.toml      a ready [kafka] table for that login's fleet.toml
    <dir>/secure/clients/<name>.*       with ``mtls_clients``: each client's certificate, its
                                        encrypted key and the key's password file (0600)
    <dir>/secure/clients-ca.pem         the CAs the MTLS listener trusts for clients (at first
                                        the local CA; replace it and restart to revoke)

Listeners: ``SASL_SSL`` for clients and between brokers (as ``admin``); the ``CONTROLLER``
listener is mutual TLS on loopback, so only a holder of the broker certificate reaches it.
``StandardAuthorizer`` denies everything no ACL allows; ``admin`` and the brokers' own
certificate principal are the super users. Logins are created at format time
(``kafka-storage format --add-scram``) from a salted password computed here, so no password
is ever on a command line.

Two more listeners, each on request (``LauncherConfig``), each with its own port per node:

* ``MTLS`` (``mtls_clients``): ``SSL`` with ``ssl.client.auth=required``; the certificate is the
  login, its DN mapped to ``User:<CN>`` (:data:`~.client_certs.MAPPING_RULES`).
* ``OAUTH`` (``oauth``): ``SASL_SSL`` with ``OAUTHBEARER`` only; Kafka's
  ``OAuthBearerValidatorCallbackHandler`` checks each JWT against the issuer's JWKS (signature,
  ``exp``, audience, issuer); the principal is ``User:<sub>``. ``connections.max.reauth.ms`` on
  it makes a client re-authenticate with a fresh token before its session ends. The JWKS URL
  is allowed with the JVM property ``org.apache.kafka.sasl.oauthbearer.allowed.urls``.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pipeline.errors import ConfigError
from pipeline.kafka.security import KafkaSecurity, SaslMechanism, Secret, SecurityProtocol
from pipeline.kafka.topics import check_name

from .client_certs import MAPPING_RULES, issue_client, load_ca
from .client_certs import write_private as _private

ADMIN = "admin"
BROKER_PRINCIPAL = "fleet-broker"  # CN of the broker certificate = its principal on CONTROLLER
SCRAM_ITERATIONS = 8192
MECHANISM = SaslMechanism.SCRAM_SHA_512
MTLS, OAUTH = "MTLS", "OAUTH"  # the extra listeners' names
ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_JWT_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator"


@dataclass(frozen=True, kw_only=True)
class OAuthValidation:
    """How the OAUTH listener validates tokens: the issuer's JWKS, and what a token must say."""

    jwks_url: str
    issuer: str
    audience: str
    reauth_ms: int = 0  # connections.max.reauth.ms on the listener (0: never re-authenticate)
    clock_skew_s: int = 30  # how long after its exp a token is still accepted (Kafka's default)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_tls(folder: Path, *, days: int = 30) -> None:
    """A fresh CA and a broker certificate for 127.0.0.1/localhost, as PEM files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("fleet-pipeline local CA"))
        .issuer_name(_name("fleet-pipeline local CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(BROKER_PRINCIPAL))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    _private(folder / "ca.key.pem", ca_key.private_bytes(pem, pkcs8, plain))
    _private(
        folder / "broker.pem",
        key.private_bytes(pem, pkcs8, plain) + cert.public_bytes(pem) + ca.public_bytes(pem),
    )


def scram_credential(password: str, *, iterations: int = SCRAM_ITERATIONS) -> tuple[str, str]:
    """(salt, salted password), base64, as ``kafka-storage format --add-scram`` takes them:
    SCRAM's Hi() is PBKDF2 with HMAC-SHA-512 (RFC 5802)."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return base64.b64encode(salt).decode(), base64.b64encode(salted).decode()


@dataclass(frozen=True, kw_only=True)
class SecureBroker:
    """The secured listeners of a local cluster and its logins (``admin`` plus one per host)."""

    folder: Path
    users: tuple[str, ...]
    mtls_clients: tuple[str, ...] = ()
    oauth: OAuthValidation | None = None

    @property
    def listeners(self) -> tuple[str, ...]:
        """The extra listeners' names, in port order."""
        return ((MTLS,) if self.mtls_clients else ()) + ((OAUTH,) if self.oauth else ())

    @classmethod
    def create(
        cls,
        folder: Path,
        hosts: tuple[str, ...],
        *,
        mtls_clients: tuple[str, ...] = (),
        oauth: OAuthValidation | None = None,
    ) -> SecureBroker:
        """New TLS files and a new random password per login, written 0600 under ``folder``;
        a certificate per ``mtls_clients`` name."""
        for host in hosts:
            check_name(host, what="host id")
            if host == ADMIN:
                raise ConfigError(f"{ADMIN!r} is the super user's login, not a host id")
        folder.mkdir(parents=True, exist_ok=True)
        make_tls(folder)
        users = (ADMIN, *dict.fromkeys(hosts))
        for user in users:
            _private(folder / "logins" / f"{user}.password", secrets.token_urlsafe(24).encode())
        ca = load_ca(folder)
        for name in mtls_clients:
            check_name(name, what="client certificate name")
            issue_client(folder / "clients", name, ca)
        (folder / "clients-ca.pem").write_bytes((folder / "ca.pem").read_bytes())
        return cls(folder=folder, users=users, mtls_clients=mtls_clients, oauth=oauth)

    @classmethod
    def load(cls, folder: Path) -> SecureBroker:
        data = json.loads((folder / "client.json").read_text())
        oauth = OAuthValidation(**data["oauth"]) if data.get("oauth") else None
        mtls = tuple(data.get("mtls_clients", ()))
        return cls(folder=folder, users=tuple(data["logins"]), mtls_clients=mtls, oauth=oauth)

    def client_files(self, name: str) -> tuple[Path, Path, Path]:
        """(certificate, key, key password file) of mTLS client ``name``."""
        base = self.folder / "clients"
        return base / f"{name}.pem", base / f"{name}.key.pem", base / f"{name}.key.password"

    def mtls_security(self, name: str) -> KafkaSecurity:
        """The [kafka] table of mTLS client ``name``: SSL, its certificate, key and the key's
        password (a Secret, read from its file)."""
        cert, key, password = self.client_files(name)
        return KafkaSecurity(
            security_protocol=SecurityProtocol.SSL,
            ssl_ca_location=str(self.ca),
            ssl_certificate_location=str(cert),
            ssl_key_location=str(key),
            secret_properties=(("ssl.key.password", Secret(password.read_text().strip())),),
            secret_sources=(("ssl.key.password", f"file:{password}"),),
        )

    def jvm_properties(self) -> dict[str, str]:
        """System properties each broker JVM needs (the JWKS URL allowed)."""
        return {ALLOWED_URLS: self.oauth.jwks_url} if self.oauth else {}

    def listener_properties(self) -> dict[str, str]:
        """server.properties lines for the MTLS and OAUTH listeners' own settings."""
        props: dict[str, str] = {}
        if self.mtls_clients:
            m = "listener.name.mtls."
            props |= {
                f"{m}ssl.client.auth": "required",
                f"{m}ssl.truststore.type": "PEM",
                f"{m}ssl.truststore.location": str(self.folder / "clients-ca.pem"),
            }
        if self.oauth is not None:
            o, v = "listener.name.oauth.", self.oauth
            props |= {
                f"{o}sasl.enabled.mechanisms": "OAUTHBEARER",
                f"{o}oauthbearer.sasl.jaas.config": f"{_OAUTH_MODULE} required;",
                f"{o}oauthbearer.sasl.server.callback.handler.class": _VALIDATOR,
                f"{o}oauthbearer.connections.max.reauth.ms": str(v.reauth_ms),
                # Kafka 4.1's default validator class (DefaultJwtValidator, built with no
                # key resolver) checks the claims but no signature: name the broker's own
                # validator, which checks the signature against the JWKS, the audience and the
                # issuer. Unprefixed: only OAUTHBEARER reads these, and only the OAUTH listener
                # enables it.
                "sasl.oauthbearer.jwt.validator.class": _JWT_VALIDATOR,
                "sasl.oauthbearer.jwks.endpoint.url": v.jwks_url,
                "sasl.oauthbearer.expected.audience": v.audience,
                "sasl.oauthbearer.expected.issuer": v.issuer,
                "sasl.oauthbearer.clock.skew.seconds": str(v.clock_skew_s),
            }
        return props

    def password_file(self, user: str) -> Path:
        return self.folder / "logins" / f"{user}.password"

    def password(self, user: str) -> Secret:
        return Secret(self.password_file(user).read_text().strip())

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    def security(self, user: str) -> KafkaSecurity:
        """The [kafka] table of ``user``'s login (``admin`` for administration)."""
        return KafkaSecurity(
            security_protocol=SecurityProtocol.SASL_SSL,
            sasl_mechanism=MECHANISM,
            sasl_username=user,
            sasl_password=self.password(user),
            password_source=f"file:{self.password_file(user)}",
            ssl_ca_location=str(self.ca),
        )

    def scram_args(self) -> list[str]:
        """``--add-scram`` arguments: salted credentials only, never a password."""
        args: list[str] = []
        for user in self.users:
            salt, salted = scram_credential(self.password(user).reveal())
            args += [
                "--add-scram",
                f"{MECHANISM.value}=[name={user},iterations={SCRAM_ITERATIONS},"
                f'salt="{salt}",saltedpassword="{salted}"]',
            ]
        return args

    def node_properties(
        self, port: int, controller_port: int, ports: dict[str, int] | None = None
    ) -> dict[str, str]:
        """server.properties lines for one node (written 0600: they hold admin's password);
        ``ports``: the MTLS / OAUTH listeners' ports on this node."""
        admin = self.password(ADMIN).reveal()
        ks = str(self.folder / "broker.pem")
        extra = ports or {}
        kinds = {MTLS: "SSL", OAUTH: "SASL_SSL"}
        more = "".join(f",{name}://127.0.0.1:{extra[name]}" for name in self.listeners)
        maps = "".join(f",{name}:{kinds[name]}" for name in self.listeners)
        return self.listener_properties() | {
            "listeners": (
                f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{more}"
            ),
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}{more}",
            "listener.security.protocol.map": f"SASL_SSL:SASL_SSL,CONTROLLER:SSL{maps}",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM.value,
            "sasl.mechanism.inter.broker.protocol": MECHANISM.value,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ADMIN}" password="{admin}";'
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": ks,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.endpoint.identification.algorithm": "https",
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": MAPPING_RULES,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN};User:{BROKER_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false",
        }

    def write_client_files(self, bootstrap: str) -> Path:
        """``client.json`` (for tools and tests) and one ``<user>.kafka.toml`` per login."""
        logins = {u: str(self.password_file(u)) for u in self.users}
        client: dict[str, Any] = {
            "bootstrap": bootstrap,
            "security_protocol": SecurityProtocol.SASL_SSL.value,
            "sasl_mechanism": MECHANISM.value,
            "ssl_ca_location": str(self.ca),
            "admin": ADMIN,
            "logins": logins,
            "mtls_clients": list(self.mtls_clients),
            "oauth": vars(self.oauth) if self.oauth else None,
        }
        path = self.folder / "client.json"
        path.write_text(json.dumps(client, indent=2) + "\n")
        for user, file in logins.items():
            (self.folder / f"{user}.kafka.toml").write_text(
                "[kafka]\n"
                f'security_protocol = "{SecurityProtocol.SASL_SSL.value}"\n'
                f'sasl_mechanism = "{MECHANISM.value}"\n'
                f'sasl_username = "{user}"\n'
                f'sasl_password_file = "{file}"\n'
                f'ssl_ca_location = "{self.ca}"\n'
            )
        return path

    def redact(self, text: str) -> str:
        """``text`` with every login's password replaced by ``***``."""
        for user in self.users:
            text = text.replace(self.password(user).reveal(), "***")
        return text
