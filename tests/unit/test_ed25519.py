"""The envelope's Ed25519 on libsodium signs exactly what ``cryptography`` signs, and verifies
what it verifies (R-ENV-3: a gateway of either kind reads the other's envelopes)."""

from __future__ import annotations

import os

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pipeline.envelope import Signer
from pipeline.envelope.ed25519 import SigningKey, VerifyKey
from pipeline.envelope.keys import _trusted


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


def test_a_signature_that_does_not_verify_raises_invalid_signature() -> None:
    theirs, public = _pair(os.urandom(32))
    other, _ = _pair(os.urandom(32))
    key, message = VerifyKey(public), b"the canonical bytes"
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


def test_bad_key_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        SigningKey(b"\x00" * 31, b"\x00" * 32)
    with pytest.raises(ValueError):
        VerifyKey(b"\x00" * 33)

