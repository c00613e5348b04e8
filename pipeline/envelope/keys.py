"""Host signing keys and the trust store (R-ENV-7: cross-host, identity comes
from the key).

File formats (docs/envelope.md, "Keys"), one JSON object per file, UTF-8:

* private key ``<key_id>.key`` (mode 0600)::

      {"format": "fleet-ed25519-private/v1", "host": "h1", "key_id": "h1.0123abcd4567ef89",
       "private_key_hex": "<32-byte Ed25519 seed, hex>"}

* public key ``<key_id>.pub``::

      {"format": "fleet-ed25519-public/v1", "host": "h1", "key_id": "h1.0123abcd4567ef89",
       "public_key_hex": "<32-byte raw Ed25519 public key, hex>"}

A trust directory is a folder of ``*.pub`` files. Several keys per host may be trusted at
once: that is how rotation overlaps (docs/envelope.md, "Key rotation").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pipeline.errors import ConfigError
from pipeline.kafka.topics import check_name
from pipeline.reasons import Config, Keys

from .ed25519 import PublicKey, SigningKey, VerifyKey

PRIVATE_FORMAT = "fleet-ed25519-private/v1"
PUBLIC_FORMAT = "fleet-ed25519-public/v1"
_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def key_id_for(host: str, public_key_bytes: bytes) -> str:
    """Default key id: ``<host>.<first 16 hex of sha256(public key)>``; unique per key."""
    return f"{host}.{hashlib.sha256(public_key_bytes).hexdigest()[:16]}"


def _check_key_id(key_id: str) -> str:
    if not _KEY_ID.match(key_id):
        raise ConfigError(f"invalid key id {key_id!r}", reason=Config.INVALID_NAME)
    return key_id


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _read_json(path: Path, fmt: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read key file {path}: {exc}", reason=Keys.KEY_FILE_INVALID
        ) from exc
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise ConfigError(f"{path}: not a {fmt} file", reason=Keys.KEY_FILE_INVALID)
    return data


class Signer:
    """A host's Ed25519 private key: the publishing gateway signs every envelope with it."""

    __slots__ = ("_key", "_signing", "host", "key_id", "public_key_bytes")

    def __init__(self, *, host: str, key_id: str, private_key: Ed25519PrivateKey) -> None:
        self.host = check_name(host, what="host id")
        self.key_id = _check_key_id(key_id)
        self._key = private_key
        self.public_key_bytes = _raw_public(private_key.public_key())
        self._signing = SigningKey(self.seed(), self.public_key_bytes)  # signs (libsodium)

    @classmethod
    def generate(cls, host: str, key_id: str | None = None) -> Signer:
        key = Ed25519PrivateKey.generate()
        pub = _raw_public(key.public_key())
        return cls(host=host, key_id=key_id or key_id_for(host, pub), private_key=key)

    @classmethod
    def from_seed(cls, host: str, seed: bytes, key_id: str | None = None) -> Signer:
        """Deterministic key from a 32-byte seed (test vectors; never for production keys)."""
        key = Ed25519PrivateKey.from_private_bytes(seed)
        pub = _raw_public(key.public_key())
        return cls(host=host, key_id=key_id or key_id_for(host, pub), private_key=key)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Signer:
        data = _read_json(Path(path), PRIVATE_FORMAT)
        try:
            seed = bytes.fromhex(data["private_key_hex"])
            return cls.from_seed(str(data["host"]), seed, key_id=str(data["key_id"]))
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"{path}: bad private key: {exc}", reason=Keys.KEY_FILE_INVALID
            ) from exc

    def sign(self, data: bytes) -> bytes:
        return self._signing.sign(data)

    def seed(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        return self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def write_private(self, path: str | os.PathLike[str]) -> Path:
        """Write the private key file with mode 0600 from the first byte (never world-readable)."""
        out = Path(path)
        doc = {
            "format": PRIVATE_FORMAT,
            "host": self.host,
            "key_id": self.key_id,
            "private_key_hex": self.seed().hex(),
        }
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, indent=2) + "\n")
        return out

    def public_document(self) -> dict[str, str]:
        return {
            "format": PUBLIC_FORMAT,
            "host": self.host,
            "key_id": self.key_id,
            "public_key_hex": self.public_key_bytes.hex(),
        }

    def write_public(self, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        out.write_text(json.dumps(self.public_document(), indent=2) + "\n", encoding="utf-8")
        return out

    def __repr__(self) -> str:  # never print key material
        return f"Signer(host={self.host!r}, key_id={self.key_id!r})"


@dataclass(frozen=True, slots=True)
class TrustedKey:
    host: str
    key_id: str
    public_key_bytes: bytes
    key: PublicKey  # verifies (ed25519-dalek or libsodium, :mod:`.ed25519`)


def read_public_file(path: str | os.PathLike[str]) -> TrustedKey:
    data = _read_json(Path(path), PUBLIC_FORMAT)
    try:
        raw = bytes.fromhex(data["public_key_hex"])
        host, key_id = str(data["host"]), str(data["key_id"])
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: bad public key: {exc}", reason=Keys.KEY_FILE_INVALID) from exc
    return _trusted(host, key_id, raw)


def _trusted(host: str, key_id: str, raw: bytes) -> TrustedKey:
    check_name(host, what="host id")
    _check_key_id(key_id)
    try:
        Ed25519PublicKey.from_public_bytes(raw)  # refused here as before: a bad key file
        key = VerifyKey(raw)
    except ValueError as exc:
        raise ConfigError(f"bad Ed25519 public key for {key_id}", reason=Keys.KEY_INVALID) from exc
    return TrustedKey(host=host, key_id=key_id, public_key_bytes=raw, key=key)


class TrustStore:
    """host -> {key_id: public key}. A key id names exactly one (host, key): the verifier learns
    the signing host from the trusted key, never from the record. Thread-safe."""

    def __init__(self) -> None:
        self._by_id: dict[str, TrustedKey] = {}
        # the same keys by the ``keyId`` header's bytes as they travel (ids are ASCII), so the
        # verifier finds a record's key without decoding it; replaced, never mutated in place
        self._by_raw: dict[bytes, TrustedKey] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrustStore:
        """Load every ``*.pub`` file of a trust directory."""
        store = cls()
        folder = Path(path)
        if not folder.is_dir():
            raise ConfigError(
                f"trust directory {folder} does not exist", reason=Keys.KEY_FILE_INVALID
            )
        for file in sorted(folder.glob("*.pub")):
            t = read_public_file(file)
            store.add(t.host, t.key_id, t.public_key_bytes)
        return store

    def reload(self, path: str | os.PathLike[str]) -> None:
        """Swap in the keys of a trust directory at once (rotation without a restart); a
        broken directory raises and leaves the current keys in place."""
        fresh = TrustStore.load(path)
        with self._lock:
            self._by_id = dict(fresh._by_id)
            self._reindex()

    def add(self, host: str, key_id: str, public_key_bytes: bytes) -> None:
        trusted = _trusted(host, key_id, public_key_bytes)
        with self._lock:
            old = self._by_id.get(key_id)
            if old is not None and (old.host, old.public_key_bytes) != (host, public_key_bytes):
                raise ConfigError(
                    f"key id {key_id} already trusted for another key or host",
                    reason=Keys.KEY_CLASH,
                )
            self._by_id[key_id] = trusted
            self._reindex()

    def remove(self, key_id: str) -> bool:
        with self._lock:
            removed = self._by_id.pop(key_id, None) is not None
            self._reindex()
            return removed

    def lookup(self, key_id: str) -> TrustedKey | None:
        return self._by_id.get(key_id)

    def lookup_raw(self, key_id: bytes) -> TrustedKey | None:
        """:meth:`lookup` by the ``keyId`` header's raw bytes (None for any id not trusted,
        including one that is not ASCII: the caller decodes it to say why)."""
        return self._by_raw.get(key_id)

    def _reindex(self) -> None:
        """Rebuild the raw-id index (under the lock) and swap it in at once: a verifier on
        another thread reads the old dict or the new one, never one half-updated."""
        self._by_raw = {k.encode("ascii"): t for k, t in self._by_id.items()}

    def keys_of(self, host: str) -> dict[str, bytes]:
        with self._lock:
            return {k: t.public_key_bytes for k, t in self._by_id.items() if t.host == host}

    def hosts(self) -> list[str]:
        with self._lock:
            return sorted({t.host for t in self._by_id.values()})

    def all(self) -> list[TrustedKey]:
        with self._lock:
            return sorted(self._by_id.values(), key=lambda t: (t.host, t.key_id))
