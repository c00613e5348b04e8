"""The pairwise vectors pin the MAC mode's wire form. Every step is rebuilt here from
docs/envelope.md ("The pairwise MAC mode") with ``cryptography`` and ``hmac`` directly, not with
pipeline's functions: the X25519 key from the host seed, the pair key, the canonical bytes, the
tag. Then the receiver's real verifier must accept each record."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pipeline.envelope import BoundedSeenSet, Pairing, PeerKey, TrustStore, Verifier
from pipeline.envelope.pairwise import AgreementKey, StaticPeerKeys
from pipeline.presence import StaticPresence
from tests.unit.test_envelope_vectors import doc_canonical

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "envelope_pairwise_v1.json").read_text("utf-8")
)
SENDER, RECIPIENT = VECTORS["sender"], VECTORS["recipient"]


def hkdf(ikm: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(ikm)


def lp(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


@pytest.mark.parametrize("end", [SENDER, RECIPIENT], ids=["sender", "recipient"])
def test_the_x25519_key_and_its_id_follow_from_the_host_seed(end: dict[str, str]) -> None:
    info = b"fleet-pipeline/x25519/v1\x00" + end["host"].encode()
    private = hkdf(bytes.fromhex(end["ed25519_seed_hex"]), info)
    assert private.hex() == end["x25519_private_hex"]
    public = (
        X25519PrivateKey.from_private_bytes(private)
        .public_key()
        .public_bytes(Encoding.Raw, PublicFormat.Raw)
    )
    assert public.hex() == end["x25519_public_hex"]
    assert end["agreement_key_id"] == f"{end['host']}.{hashlib.sha256(public).hexdigest()[:16]}"


def test_the_pair_key_is_the_same_from_both_ends() -> None:
    keys = {}
    for me, peer in ((SENDER, RECIPIENT), (RECIPIENT, SENDER)):
        own = X25519PrivateKey.from_private_bytes(bytes.fromhex(me["x25519_private_hex"]))
        shared = own.exchange(
            X25519PublicKey.from_public_bytes(bytes.fromhex(peer["x25519_public_hex"]))
        )
        assert shared.hex() == VECTORS["shared_secret_hex"]
        ends = sorted(
            (e["host"].encode(), bytes.fromhex(e["x25519_public_hex"])) for e in (me, peer)
        )
        info = b"fleet-pipeline/pairwise/v1\x00" + b"".join(lp(h) + lp(p) for h, p in ends)
        keys[me["host"]] = hkdf(shared, info)
    assert keys["host-a"] == keys["host-b"]
    assert keys["host-a"].hex() == VECTORS["pair_key_hex"]
    assert VECTORS["key_id"] == f"{SENDER['agreement_key_id']}/{RECIPIENT['agreement_key_id']}"


@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector_canonical_bytes_and_tag_recompute(vec: dict[str, Any]) -> None:
    headers = {h["name"]: bytes.fromhex(h["value_hex"]) for h in vec["headers"]}
    assert [h["name"] for h in vec["headers"]][-1] == "mac" and "sig" not in headers
    assert headers["keyId"].decode() == VECTORS["key_id"]
    body = bytes.fromhex(vec["body_hex"])
    canonical = doc_canonical({k: v for k, v in headers.items() if k != "mac"}, vec["topic"], body)
    assert canonical.hex() == vec["canonical_hex"]
    tag = hmac.new(bytes.fromhex(VECTORS["pair_key_hex"]), canonical, hashlib.sha256).digest()
    assert tag.hex() == vec["mac_hex"] == headers["mac"].hex()


@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector_verifies_at_the_recipient(vec: dict[str, Any]) -> None:
    trust = TrustStore()
    trust.add(SENDER["host"], SENDER["ed25519_key_id"], _ed_public(SENDER["ed25519_seed_hex"]))
    peer = PeerKey(
        host=SENDER["host"],
        key_id=SENDER["agreement_key_id"],
        public_bytes=bytes.fromhex(SENDER["x25519_public_hex"]),
        vouched_by=SENDER["ed25519_key_id"],
    )
    own = AgreementKey.from_private_bytes(
        RECIPIENT["host"], bytes.fromhex(RECIPIENT["x25519_private_hex"])
    )
    verifier = Verifier(
        host=RECIPIENT["host"],
        trust=trust,
        presence=StaticPresence({"worker-1": "host-a"}),
        seen=BoundedSeenSet(),
        clock_ms=lambda: VECTORS["verify_at_ms"],
        pairing=Pairing(own=own, peers=StaticPeerKeys(peer), trusted=trust.lookup),
    )
    got = verifier.verify(
        topic=vec["topic"],
        key=bytes.fromhex(vec["record_key_hex"]),
        headers=[(h["name"], bytes.fromhex(h["value_hex"])) for h in vec["headers"]],
        value=bytes.fromhex(vec["body_hex"]),
    )
    assert got.signer_host == "host-a" and got.key_id == VECTORS["key_id"]


def _ed_public(seed_hex: str) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed_hex))
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def test_vector_file_matches_the_generator() -> None:
    from tests.vectors.make_pairwise_vectors import build

    assert build() == VECTORS
