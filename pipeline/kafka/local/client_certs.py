"""Client certificates for the local secured broker's mutual-TLS listener (docs/security.md).

A client's certificate is its login on an ``SSL`` listener with ``ssl.client.auth=required``:
the broker checks it against the CAs it trusts for clients (``clients-ca.pem``) and maps its
subject DN to a principal with ``ssl.principal.mapping.rules``::

    subject  CN=<name>,OU=fleet-clients,O=fleet-pipeline local     (RFC 2253 order, as Kafka
                                                                     prints it)
    rule     RULE:^CN=([^,]+),OU=fleet-clients,O=[^,]+$/$1/      -> principal User:<name>

Files per client, under ``<secure>/clients/``: ``<name>.pem`` (certificate + the CA),
``<name>.key.pem`` (PKCS#8, encrypted with the password in ``<name>.key.password``, 0600), the
PEM files librdkafka reads (``ssl.certificate.location``, ``ssl.key.location``,
``ssl.key.password`` from the password file, never from a command line).
"""

from __future__ import annotations

import datetime
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_OU = "fleet-clients"
CLIENT_O = "fleet-pipeline local"
# Kafka's mapping: a client certificate's CN is the principal's name; the brokers' own
# certificate (CN only) keeps its CN; anything else is the whole DN (DEFAULT)
MAPPING_RULES = f"RULE:^CN=([^,]+),OU={CLIENT_OU},O=[^,]+$/$1/,RULE:^CN=([^,]+)$/$1/,DEFAULT"


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by the owner only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def client_subject(name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, CLIENT_O),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, CLIENT_OU),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )


def new_ca(
    common_name: str, *, days: int = 30
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (for a test's foreign or replacement CA)."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def load_ca(folder: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The local CA ``make_tls`` wrote in ``folder`` (``ca.pem``, ``ca.key.pem``)."""
    key = serialization.load_pem_private_key((folder / "ca.key.pem").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key, x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())


def issue_client(
    folder: Path,
    name: str,
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    *,
    days: int = 30,
) -> tuple[Path, Path, Path]:
    """``name``'s certificate signed by ``ca`` and its encrypted key, written under ``folder``:
    (certificate, key, key password file)."""
    ca_key, ca_cert = ca
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(client_subject(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    password = secrets.token_urlsafe(18)
    pem = serialization.Encoding.PEM
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key.pem"
    password_path = folder / f"{name}.key.password"
    folder.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    encrypted = serialization.BestAvailableEncryption(password.encode())
    write_private(key_path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, encrypted))
    write_private(password_path, password.encode())
    return cert_path, key_path, password_path


def certificate_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)
