"""Ed25519 signing and verification on libsodium (PyNaCl's binding).

Every envelope is signed once and verified once or twice, so these two calls are a large part of
a message's CPU. Measured here (one core, a 300-byte message): libsodium verifies in about 39 µs
where OpenSSL, through ``cryptography``, takes 84, and signs in about 16 µs against 26. The
bytes are the same: Ed25519 is deterministic (RFC 8032), so a key signs exactly what
``cryptography`` signs with it (``tests/unit/test_ed25519.py`` checks it), and gateways of either
kind read each other's envelopes. libsodium's verify is the stricter of the two (it refuses a
non-canonical ``S`` and small-order keys and ``R``): it accepts nothing OpenSSL refuses.

Keys are still made, stored and read with ``cryptography`` (:mod:`.keys`); this module only
holds their raw bytes. Both calls release the GIL, as ``cryptography``'s do, so a batch's
signatures still verify on several threads (:mod:`.batch`). A bad signature raises
``cryptography``'s :class:`~cryptography.exceptions.InvalidSignature`, as before.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_open
from nacl.exceptions import CryptoError

SIGNATURE_BYTES = crypto_sign_BYTES  # 64


class SigningKey:
    """A private key: ``seed`` (32 bytes) and the public key it derives (32 bytes)."""

    __slots__ = ("_secret",)

    def __init__(self, seed: bytes, public: bytes) -> None:
        if len(seed) != 32 or len(public) != 32:
            raise ValueError("an Ed25519 seed and public key are 32 bytes each")
        self._secret = seed + public  # libsodium's secret key layout

    def sign(self, data: bytes) -> bytes:
        """The 64-byte signature of ``data``."""
        return crypto_sign(data, self._secret)[:SIGNATURE_BYTES]

    def __repr__(self) -> str:  # never print key material
        return "SigningKey(...)"


class VerifyKey:
    """A public key (32 raw bytes)."""

    __slots__ = ("_public",)

    def __init__(self, public: bytes) -> None:
        if len(public) != 32:
            raise ValueError("an Ed25519 public key is 32 bytes")
        self._public = public

    def verify(self, signature: bytes, data: bytes) -> None:
        """Return if ``signature`` is this key's over ``data``; else raise
        :class:`~cryptography.exceptions.InvalidSignature`."""
        if len(signature) != SIGNATURE_BYTES:
            raise InvalidSignature
        try:
            crypto_sign_open(signature + data, self._public)
        except CryptoError:
            raise InvalidSignature from None
