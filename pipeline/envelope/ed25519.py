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

**Verify on ed25519-dalek when it is installed.** The optional native module
``fleet_ed25519`` (``native/ed25519``, built by ``make setup`` where a Rust toolchain is)
verifies on ed25519-dalek under libsodium's rules, about a third faster here (34 µs against
54 for a 300-byte message: ``docs/performance.md``). :data:`VERIFIER` names the one in use.
Built for x86-64-v3 on x86-64, it is used only where the CPU has those instructions (else a
copied install would die of an illegal instruction); anywhere it is missing, verification is
libsodium's, as before. Both give the same answer on every signature
(``tests/unit/test_ed25519.py``); signing stays on libsodium, which signs as fast.
"""

from __future__ import annotations

import importlib
import platform
from typing import Any, Protocol

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


class PublicKey(Protocol):
    """A trusted public key: :class:`LibsodiumVerifyKey` or :class:`NativeVerifyKey`."""

    def verify(self, signature: bytes, data: bytes) -> None: ...


class LibsodiumVerifyKey:
    """A public key (32 raw bytes), verified by libsodium."""

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


class NativeVerifyKey:
    """A public key (32 raw bytes), verified by the native module (ed25519-dalek)."""

    __slots__ = ("_key",)

    def __init__(self, public: bytes) -> None:
        if len(public) != 32:
            raise ValueError("an Ed25519 public key is 32 bytes")
        assert _NATIVE is not None, "the native module is not installed"
        self._key = _NATIVE.VerifyKey(public)  # decoded once; a key libsodium refuses fails all

    def verify(self, signature: bytes, data: bytes) -> None:
        """As :meth:`LibsodiumVerifyKey.verify`."""
        if not self._key.verify(signature, data):
            raise InvalidSignature


# the instructions the native module is built with on x86-64 (x86-64-v3, scripts/build-native.sh)
X86_64_V3 = frozenset({"avx", "avx2", "bmi1", "bmi2", "fma", "f16c", "movbe", "abm"})


def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def _native_module() -> Any:
    """``fleet_ed25519`` if it is installed and this CPU runs what it was built for, else None."""
    if platform.machine() in ("x86_64", "AMD64") and not _cpu_flags() >= X86_64_V3:
        return None
    try:
        return importlib.import_module("fleet_ed25519")
    except ImportError:
        return None


_NATIVE = _native_module()
VerifyKey: type[LibsodiumVerifyKey] | type[NativeVerifyKey] = (
    LibsodiumVerifyKey if _NATIVE is None else NativeVerifyKey
)
"""The class trusted keys are made with in this process."""
VERIFIER = "libsodium" if _NATIVE is None else "ed25519-dalek"
"""Which library verifies envelopes in this process (the inbox's start line,
``fleet_gateway_envelope_verifier_info``, ``bench hotpath``)."""
