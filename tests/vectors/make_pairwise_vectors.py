"""Regenerate tests/vectors/envelope_pairwise_v1.json: ``python tests/vectors/make_pairwise_vectors.py``.

The pairwise MAC mode (docs/envelope.md, "The pairwise MAC mode"): fixed host keys -> the derived
X25519 keys -> the pair key -> fixed HMAC-SHA256 tags over the same canonical bytes a signature
covers. Everything is deterministic; a diff here is a wire-format break.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.envelope import AgreementKey, Envelope, Kind, Signer, canonical_bytes, encode
from pipeline.envelope.pairwise import Pairing, PeerKey, StaticPeerKeys, pair_key

OUT = Path(__file__).with_name("envelope_pairwise_v1.json")
SEEDS = {"host-a": bytes(range(32)), "host-b": bytes(range(32, 64))}  # test keys, never real ones


def _cases() -> list[tuple[str, Envelope]]:
    base: dict[str, Any] = {"trace_id": "t-0001", "now_ms": 1_767_225_600_000, "ttl_s": 60}
    return [
        (
            "send",
            Envelope.new(
                kind=Kind.SEND, sender="worker-1", to="main-1", body=b"hello, main",
                msg_id="m-0001", **base,
            ),
        ),
        (
            "ask_with_turn",
            Envelope.new(
                kind=Kind.ASK, sender="worker-1", to="main-1", body="¿qué? \u2713".encode(),
                msg_id="m-0002", turn_id="turn-7", **base,
            ),
        ),
        (
            "empty_body",
            Envelope.new(
                kind=Kind.NO_WAITER, sender="host-a._gateway", to="worker-9", body=b"",
                msg_id="m-0003", **base,
            ),
        ),
    ]  # fmt: skip


def _host(signer: Signer, agreement: AgreementKey) -> dict[str, str]:
    return {
        "host": signer.host,
        "ed25519_seed_hex": signer.seed().hex(),
        "ed25519_key_id": signer.key_id,
        "x25519_private_hex": agreement.private_bytes().hex(),
        "x25519_public_hex": agreement.public_bytes.hex(),
        "agreement_key_id": agreement.key_id,
    }


def build() -> dict[str, Any]:
    signers = {h: Signer.from_seed(h, seed, key_id=f"{h}.k1") for h, seed in SEEDS.items()}
    keys = {h: AgreementKey.from_signer(s) for h, s in signers.items()}
    a, b = keys["host-a"], keys["host-b"]
    peer_b = PeerKey(host="host-b", key_id=b.key_id, public_bytes=b.public_bytes, vouched_by="-")
    pair = Pairing(own=a, peers=StaticPeerKeys(peer_b), trusted=lambda _k: True).seal("host-b")
    assert pair is not None
    topic = "fleet.inbox.host-b"
    vectors = []
    for name, env in _cases():
        key, headers, value = encode(env, topic=topic, signer=signers["host-a"], pair=pair)
        covered = {h: v for h, v in headers if h != "mac"}
        vectors.append(
            {
                "name": name,
                "topic": topic,
                "record_key_hex": key.hex(),
                "headers": [
                    {
                        "name": h,
                        "value_hex": v.hex(),
                        **({} if h == "mac" else {"text": v.decode()}),
                    }
                    for h, v in headers
                ],
                "body_hex": value.hex(),
                "canonical_hex": canonical_bytes(covered, topic=topic, body=value).hex(),
                "mac_hex": dict(headers)["mac"].hex(),
            }
        )
    return {
        "format": "fleet-envelope-pairwise-vectors/v1",
        "note": "X25519 + HKDF-SHA256 + HMAC-SHA256; derivations and canonical form: docs/envelope.md",
        "sender": _host(signers["host-a"], a),
        "recipient": _host(signers["host-b"], b),
        "shared_secret_hex": a.exchange(b.public_bytes).hex(),
        "pair_key_hex": pair_key(a, "host-b", b.public_bytes).hex(),
        "key_id": pair.outbound_key_id,
        "verify_at_ms": 1_767_225_610_000,
        "vectors": vectors,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
