"""The envelope's Ed25519 on libsodium signs exactly what ``cryptography`` signs, and verifies
what it verifies (R-ENV-3: a gateway of either kind reads the other's envelopes). The native
verifier (ed25519-dalek, ``native/ed25519``) gives libsodium's answer on every signature, and is
the one in use wherever it could be built."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.bindings import crypto_sign, crypto_sign_keypair

from pipeline.envelope import Signer, ed25519
from pipeline.envelope.ed25519 import (
    X86_64_V3,
    LibsodiumVerifyKey,
    NativeVerifyKey,
    SigningKey,
    VerifyKey,
    _cpu_flags,
)
from pipeline.envelope.keys import _trusted

NATIVE = ed25519._NATIVE is not None
IMPLEMENTATIONS = [
    LibsodiumVerifyKey,
    pytest.param(
        NativeVerifyKey,
        marks=pytest.mark.skipif(not NATIVE, reason="fleet_ed25519 not built (no cargo)"),
    ),
]


def _pair(seed: bytes) -> tuple[Ed25519PrivateKey, bytes]:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key, key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@pytest.mark.parametrize("size", [0, 1, 63, 64, 300, 4096])
def test_the_same_key_signs_the_same_bytes_and_each_verifies_the_other(size: int) -> None:
    for _ in range(20):
        seed, message = os.urandom(32), os.urandom(size)
        theirs, public = _pair(seed)
        ours = SigningKey(seed, public).sign(message)
        assert ours == theirs.sign(message)
        VerifyKey(public).verify(theirs.sign(message), message)
        theirs.public_key().verify(ours, message)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_signature_that_does_not_verify_raises_invalid_signature(impl: type) -> None:
    theirs, public = _pair(os.urandom(32))
    other, _ = _pair(os.urandom(32))
    key, message = impl(public), b"the canonical bytes"
    good = theirs.sign(message)
    bad = [
        (good, message + b"!"),  # tampered message
        (bytes([good[0] ^ 1]) + good[1:], message),  # tampered signature
        (other.sign(message), message),  # another key's
        (good[:63], message),  # too short: never read into the message
        (good + b"\x00", message),  # too long
        (b"", message),
        (good[:32] + message[:32], message[32:]),  # a split that moves bytes across
    ]
    for signature, data in bad:
        with pytest.raises(InvalidSignature):
            key.verify(signature, data)


def test_a_signer_and_a_trusted_key_use_it() -> None:
    signer = Signer.generate("A")
    trusted = _trusted("A", signer.key_id, signer.public_key_bytes)
    assert isinstance(trusted.key, VerifyKey)
    signature = signer.sign(b"m")
    trusted.key.verify(signature, b"m")
    _pair(signer.seed())[0].public_key().verify(signature, b"m")  # cryptography agrees
    assert repr(signer._signing) == "SigningKey(...)"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_bad_key_lengths_are_refused(impl: type) -> None:
    with pytest.raises(ValueError):
        SigningKey(b"\x00" * 31, b"\x00" * 32)
    with pytest.raises(ValueError):
        impl(b"\x00" * 33)


# -- the native verifier: libsodium's answer on every signature ---------------------------------

L = 2**252 + 27742317777372353535851937790883648493  # the group order
P = 2**255 - 19


def _enc(y: int, sign: int = 0) -> bytes:
    return (y | sign << 255).to_bytes(32, "little")


# points of small order (1, 2, 4, 8) and encodings of y >= p (not canonical), as libsodium lists
# them; a key or an R among them is refused by both
SMALL_ORDER = [
    _enc(1),  # the identity
    _enc(P - 1),  # order 2
    _enc(0),
    _enc(0, 1),  # order 4
    bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),  # order 8
    bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"),  # order 8
]
NOT_CANONICAL = [_enc(P + k, s) for k in (0, 1, 2, 3, 5, 18) for s in (0, 1)]


def _answers(public: bytes, signature: bytes, message: bytes) -> tuple[bool, bool]:
    """(libsodium accepts, native accepts)."""

    def accepts(impl: type) -> bool:
        try:
            impl(public).verify(signature, message)
        except InvalidSignature:
            return False
        return True

    return accepts(LibsodiumVerifyKey), accepts(NativeVerifyKey)


native_only = pytest.mark.skipif(not NATIVE, reason="fleet_ed25519 not built (no cargo)")


@native_only
def test_native_and_libsodium_agree_on_valid_and_mutated_signatures() -> None:
    for size in (0, 1, 64, 300, 1500):
        for _ in range(40):
            public, secret = crypto_sign_keypair()
            message = os.urandom(size)
            signature = crypto_sign(message, secret)[:64]
            assert _answers(public, signature, message) == (True, True)
            # one byte of the key, the signature or the message changed
            parts = [bytearray(public), bytearray(signature), bytearray(message)]
            which = parts[os.urandom(1)[0] % (3 if size else 2)]
            which[os.urandom(1)[0] % len(which)] ^= 1 << (os.urandom(1)[0] % 8)
            answers = _answers(bytes(parts[0]), bytes(parts[1]), bytes(parts[2]))
            assert answers[0] == answers[1]
            assert answers == (False, False)


@native_only
def test_native_refuses_what_libsodium_refuses_at_the_edges() -> None:
    public, secret = crypto_sign_keypair()
    message = b"the canonical bytes"
    good = crypto_sign(message, secret)[:64]
    r, s = good[:32], int.from_bytes(good[32:], "little")
    cases = [
        (public, r + (s + L).to_bytes(32, "little"), message),  # S not below the order
        (public, r + (2**253 - 1).to_bytes(32, "little"), message),
        *[(bad, good, message) for bad in SMALL_ORDER + NOT_CANONICAL],  # a key libsodium refuses
        *[(public, bad + good[32:], message) for bad in SMALL_ORDER + NOT_CANONICAL],  # such an R
        *[(bad, bad + (0).to_bytes(32, "little"), message) for bad in SMALL_ORDER],  # S = 0
    ]
    for case in cases:
        assert _answers(*case) == (False, False), case


def test_the_native_verifier_is_in_use_wherever_it_could_be_built() -> None:
    """``make setup`` builds it where a Rust toolchain is: a missing build step shows here."""
    cargo = shutil.which("cargo") or (Path.home() / ".cargo/bin/cargo").is_file()
    if not cargo:
        pytest.skip("no Rust toolchain: envelopes verify on libsodium")
    if os.uname().machine == "x86_64" and not _cpu_flags() >= X86_64_V3:
        assert ed25519.VERIFIER == "libsodium"  # built for x86-64-v3: never loaded here
        return
    assert ed25519.VERIFIER == "ed25519-dalek"
    assert VerifyKey is NativeVerifyKey

