"""Pairwise MAC keys between gateways (docs/envelope.md, "The pairwise MAC mode").

Each gateway has an X25519 key pair. Its public key travels in the host's gateway presence
entry, which is Ed25519-signed: a peer accepts it only because a trusted host key vouched for
it. Two hosts agree on one 32-byte key per pair::

    shared = X25519(own private, peer public)
    key    = HKDF-SHA256(shared, salt=None, length=32,
                         info = PAIR_LABEL || lp(host lo) || lp(pub lo) || lp(host hi) || lp(pub hi))

``lo``/``hi`` order the two (host id, public key) pairs by host id (UTF-8 bytes), so both ends
derive the same key; ``lp`` is a 4-byte big-endian length prefix. A record MAC'd with it carries
``mac`` = HMAC-SHA256(key, canonical bytes) instead of ``sig``, and ``keyId`` =
``<sender agreement key id>/<recipient agreement key id>`` (each ``<host>.<16 hex of sha256(pub)>``).

Keys are derived once per (own key, peer key) and cached; a host that publishes a new X25519 key
gets a new key id, so its pairs are derived anew (rotation) while the previous key id of each
host is still accepted for records in flight.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .keys import Signer, key_id_for
from .reasons import Kind

PAIR_LABEL = b"fleet-pipeline/pairwise/v1\x00"
AGREEMENT_LABEL = b"fleet-pipeline/x25519/v1\x00"
MAC_LEN = 32
PUBLIC_LEN = 32
SEPARATOR = "/"

# Only conversation kinds between two hosts' agents may travel MAC'd. Presence, SPAWN/STOP,
# FAILED and INJECTED reports and BROADCAST stay Ed25519: a third party (an operator reading a
# dead letter, another host) must be able to check who said them.
MAC_KINDS: frozenset[Kind] = frozenset(
    {
        Kind.SEND,
        Kind.REPLY,
        Kind.ASK,
        Kind.ANSWER,
        Kind.TOO_LATE,
        Kind.NO_WAITER,
        Kind.ABANDONED,
    }
)


def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def mac(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 tag of ``message`` (the canonical bytes) under a pair key."""
    return hmac.digest(key, message, "sha256")


class AgreementKey:
    """A gateway's X25519 key pair. ``from_signer`` derives it from the host's Ed25519 seed, so
    it needs no file of its own, survives restarts (records in flight still verify) and rotates
    with the host key."""

    __slots__ = ("_key", "host", "key_id", "public_bytes")

    def __init__(self, *, host: str, private_key: X25519PrivateKey) -> None:
        self.host = host
        self._key = private_key
        self.public_bytes = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = key_id_for(host, self.public_bytes)

    @classmethod
    def generate(cls, host: str) -> AgreementKey:
        return cls(host=host, private_key=X25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, host: str, raw: bytes) -> AgreementKey:
        return cls(host=host, private_key=X25519PrivateKey.from_private_bytes(raw))

    @classmethod
    def from_signer(cls, signer: Signer) -> AgreementKey:
        """HKDF-SHA256(Ed25519 seed, info = AGREEMENT_LABEL || host): a separate key, one way
        from the host key (knowing it reveals nothing about the signing key)."""
        raw = HKDF(
            algorithm=hashes.SHA256(),
            length=32,
            salt=None,
            info=AGREEMENT_LABEL + signer.host.encode("utf-8"),
        ).derive(signer.seed())
        return cls.from_private_bytes(signer.host, raw)

    def private_bytes(self) -> bytes:
        """The raw 32-byte X25519 private key (test vectors; never logged)."""
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        return self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def exchange(self, peer_public: bytes) -> bytes:
        """The X25519 shared secret; ``ValueError`` for a malformed or low-order peer key."""
        return self._key.exchange(X25519PublicKey.from_public_bytes(peer_public))

    def __repr__(self) -> str:  # never print key material
        return f"AgreementKey(host={self.host!r}, key_id={self.key_id!r})"


def pair_key(own: AgreementKey, peer_host: str, peer_public: bytes) -> bytes:
    """The pair's 32-byte MAC key; both ends get the same bytes (module docstring)."""
    shared = own.exchange(peer_public)
    ends = sorted(
        [(own.host.encode("utf-8"), own.public_bytes), (peer_host.encode("utf-8"), peer_public)]
    )
    info = PAIR_LABEL + b"".join(_lp(host) + _lp(pub) for host, pub in ends)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


@dataclass(frozen=True, slots=True)
class PeerKey:
    """A peer's X25519 public key as its signed gateway presence published it. ``vouched_by``
    is the Ed25519 key id that signed that presence: untrusting it withdraws this key too."""

    host: str
    key_id: str
    public_bytes: bytes
    vouched_by: str


@runtime_checkable
class PeerKeys(Protocol):
    """Where the peers' agreement keys come from (the roster view): ``current(host)`` for a
    sender, ``by_id(key_id)`` (current or the previous one) for a receiver."""

    def current_agreement(self, host: str) -> PeerKey | None: ...
    def agreement(self, key_id: str) -> PeerKey | None: ...


class StaticPeerKeys:
    """A fixed :class:`PeerKeys` for tests and tools."""

    def __init__(self, *keys: PeerKey) -> None:
        self.by_host: dict[str, PeerKey] = {}
        self.by_id: dict[str, PeerKey] = {}
        for k in keys:
            self.publish(k)

    def publish(self, key: PeerKey) -> None:
        self.by_host[key.host] = key
        self.by_id[key.key_id] = key

    def current_agreement(self, host: str) -> PeerKey | None:
        return self.by_host.get(host)

    def agreement(self, key_id: str) -> PeerKey | None:
        return self.by_id.get(key_id)


@dataclass(frozen=True, slots=True)
class Pair:
    """One usable pair: the peer host, the MAC key, and the two agreement key ids."""

    host: str
    key: bytes
    own_id: str
    peer: PeerKey

    @property
    def outbound_key_id(self) -> str:
        """The ``keyId`` of a record this host MACs for the peer: sender / recipient."""
        return f"{self.own_id}{SEPARATOR}{self.peer.key_id}"


class UnknownPair(Exception):
    """Why a pair could not be used (the verifier turns it into ``UNKNOWN_PAIR``)."""


class Pairing:
    """This gateway's side of every pair: seal for a recipient host, open a record's ``keyId``.

    ``trusted(key_id)`` says whether an Ed25519 key id is still trusted (the trust store's
    lookup); a peer key vouched by a key no longer trusted is not used either way.
    ``previous`` are this host's older agreement keys, still accepted for records in flight."""

    def __init__(
        self,
        *,
        own: AgreementKey,
        peers: PeerKeys,
        trusted: Callable[[str], object | None],
        previous: tuple[AgreementKey, ...] = (),
    ) -> None:
        self.own = own
        self.host = own.host
        self.peers = peers
        self._trusted = trusted
        self._mine = {k.key_id: k for k in (*previous, own)}
        self._pairs: dict[tuple[str, str], Pair] = {}  # (own key id, peer key id) -> pair
        self._opened: dict[bytes, tuple[str, str]] = {}  # raw keyId -> (own id, peer id)
        self._lock = threading.Lock()

    def seal(self, to_host: str) -> Pair | None:
        """The pair to MAC a record for ``to_host`` with; None when ``to_host`` published no
        agreement key (or its voucher is no longer trusted): then the record is signed."""
        peer = self.peers.current_agreement(to_host)
        if peer is None or self._trusted(peer.vouched_by) is None:
            return None
        try:
            return self._pair(self.own, peer)
        except ValueError:
            return None

    def open(self, raw_key_id: bytes) -> Pair:
        """The pair a received record's ``keyId`` names; raises :class:`UnknownPair`."""
        ids = self._opened.get(raw_key_id)
        if ids is None:
            ids = self._split(raw_key_id)
        own_id, peer_id = ids
        peer = self.peers.agreement(peer_id)
        if peer is None:
            raise UnknownPair(f"no signed presence published agreement key {peer_id!r}")
        if self._trusted(peer.vouched_by) is None:
            raise UnknownPair(f"agreement key {peer_id!r} was vouched by an untrusted key")
        try:
            return self._pair(self._mine[own_id], peer)
        except ValueError as exc:
            raise UnknownPair(f"agreement key {peer_id!r} is unusable: {exc}") from exc

    def _split(self, raw_key_id: bytes) -> tuple[str, str]:
        try:
            text = raw_key_id.decode("utf-8")
        except UnicodeDecodeError:
            raise UnknownPair("keyId is not UTF-8") from None
        peer_id, sep, own_id = text.partition(SEPARATOR)
        if not sep or own_id not in self._mine:
            raise UnknownPair(f"keyId {text!r} names no agreement key of {self.host}")
        with self._lock:
            if len(self._opened) > 4096:  # bounded: junk ids never grow it without end
                self._opened.clear()
            self._opened[raw_key_id] = (own_id, peer_id)
        return own_id, peer_id

    def _pair(self, own: AgreementKey, peer: PeerKey) -> Pair:
        cached = self._pairs.get((own.key_id, peer.key_id))
        if cached is not None and cached.peer == peer:
            return cached
        pair = Pair(
            host=peer.host,
            key=pair_key(own, peer.host, peer.public_bytes),
            own_id=own.key_id,
            peer=peer,
        )
        with self._lock:
            self._pairs[(own.key_id, peer.key_id)] = pair
        return pair
