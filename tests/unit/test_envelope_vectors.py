"""The checked-in vectors pin the v1 wire format; the canonical form is rebuilt here from
docs/envelope.md alone (an independent re-implementation, not pipeline's own function)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from pipeline.envelope import BoundedSeenSet, Signer, TrustStore, Verifier
from pipeline.presence import StaticPresence

VECTORS = json.loads(
    (Path(__file__).parents[1] / "vectors" / "envelope_v1.json").read_text(encoding="utf-8")
)
ORDER = ["v", "kind", "msgId", "traceId", "from", "to", "turnId", "spawnId", "ts", "expiresAt",
         "keyId"]  # fmt: skip


def doc_canonical(headers: dict[str, bytes], topic: str, body: bytes) -> bytes:
    out = b"fleet-pipeline/envelope/v1\x00"
    for name in ORDER:
        if name in headers:
            out += b"\x01" + len(headers[name]).to_bytes(4, "big") + headers[name]
        else:
            out += b"\x00"
    t = topic.encode()
    return out + len(t).to_bytes(4, "big") + t + len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector_canonical_bytes_and_signature_recompute(vec: dict) -> None:
    headers = {h["name"]: bytes.fromhex(h["value_hex"]) for h in vec["headers"]}
    body = bytes.fromhex(vec["body_hex"])
    canonical = doc_canonical({k: v for k, v in headers.items() if k != "sig"}, vec["topic"], body)
    assert canonical.hex() == vec["canonical_hex"]
    seed = bytes.fromhex(VECTORS["private_key_seed_hex"])
    private = Ed25519PrivateKey.from_private_bytes(seed)
    assert private.sign(canonical).hex() == vec["signature_hex"]  # Ed25519 is deterministic
    public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(VECTORS["public_key_hex"]))
    public.verify(bytes.fromhex(vec["signature_hex"]), canonical)  # raises if wrong
    assert headers["sig"].hex() == vec["signature_hex"]
    assert [h["name"] for h in vec["headers"]][-1] == "sig"


@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector_verifies_at_the_receiver(vec: dict) -> None:
    trust = TrustStore()
    trust.add(VECTORS["host"], VECTORS["key_id"], bytes.fromhex(VECTORS["public_key_hex"]))
    host = vec["topic"].rsplit(".", 1)[1]
    verifier = Verifier(
        host=host,
        trust=trust,
        presence=StaticPresence({"worker-1": "host-a", "main-1": "host-a"}),
        seen=BoundedSeenSet(),
        clock_ms=lambda: VECTORS["verify_at_ms"],
    )
    got = verifier.verify(
        topic=vec["topic"],
        key=bytes.fromhex(vec["record_key_hex"]),
        headers=[(h["name"], bytes.fromhex(h["value_hex"])) for h in vec["headers"]],
        value=bytes.fromhex(vec["body_hex"]),
    )
    assert got.signer_host == "host-a" and got.key_id == VECTORS["key_id"]
    assert got.envelope.body == bytes.fromhex(vec["body_hex"])


def test_vector_file_matches_the_generator() -> None:
    from tests.vectors.make_envelope_vectors import build

    assert build() == VECTORS


def test_signer_from_vector_seed_has_vector_public_key() -> None:
    s = Signer.from_seed("host-a", bytes.fromhex(VECTORS["private_key_seed_hex"]))
    assert s.public_key_bytes.hex() == VECTORS["public_key_hex"]


def test_worked_example_in_the_doc_is_the_send_vector() -> None:
    import re

    doc = (Path(__file__).parents[2] / "docs" / "envelope.md").read_text(encoding="utf-8")
    block = doc.split("```\n66 6c", 1)[1].split("```", 1)[0]
    lines = ("66 6c" + block).strip().splitlines()
    hexed = "".join(re.sub(r"\s{2,}.*", "", line).replace(" ", "") for line in lines)
    assert hexed == VECTORS["vectors"][0]["canonical_hex"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
@pytest.mark.parametrize("vec", VECTORS["vectors"], ids=lambda v: v["name"])
def test_vector_signature_verifies_with_the_openssl_cli(vec: dict, tmp_path: Path) -> None:
    spki = bytes.fromhex("302a300506032b6570032100" + VECTORS["public_key_hex"])  # RFC 8410
    pem = b"-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(spki) + b"\n-----END PUBLIC KEY-----\n"
    (tmp_path / "pub.pem").write_bytes(pem)
    (tmp_path / "msg").write_bytes(bytes.fromhex(vec["canonical_hex"]))
    (tmp_path / "sig").write_bytes(bytes.fromhex(vec["signature_hex"]))
    cmd = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", "pub.pem", "-rawin",
           "-in", "msg", "-sigfile", "sig"]  # fmt: skip
    ok = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr + ok.stdout
    (tmp_path / "msg").write_bytes(bytes.fromhex(vec["canonical_hex"]) + b"!")
    bad = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert bad.returncode != 0
