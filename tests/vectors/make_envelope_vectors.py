"""Regenerate tests/vectors/envelope_v1.json: ``python tests/vectors/make_envelope_vectors.py``.

Ed25519 signatures are deterministic, so the file only changes if the canonical form does --
which would be a wire-format break (bump ``v``), never a silent edit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.envelope import Envelope, Kind, Signer, canonical_bytes, encode

OUT = Path(__file__).with_name("envelope_v1.json")
SEED = bytes(range(32))  # 000102...1f: a test key, never a real one
HOST = "host-a"
KEY_ID = "host-a.k1"


def _cases() -> list[tuple[str, str, Envelope]]:
    base: dict[str, Any] = {"trace_id": "t-0001", "now_ms": 1_767_225_600_000, "ttl_s": 60}
    return [
        (
            "send",
            "fleet.inbox.host-b",
            Envelope.new(
                kind=Kind.SEND,
                sender="worker-1",
                to="main-1",
                body=b"hello, main",
                msg_id="m-0001",
                **base,
            ),
        ),
        (
            "ask_with_turn",
            "fleet.inbox.host-b",
            Envelope.new(
                kind=Kind.ASK,
                sender="worker-1",
                to="main-1",
                body="¿qué? \u2713".encode(),
                msg_id="m-0002",
                turn_id="turn-7",
                **base,
            ),
        ),
        (
            "empty_body",
            "fleet.inbox.host-b",
            Envelope.new(
                kind=Kind.NO_WAITER,
                sender="host-a._gateway",
                to="worker-9",
                body=b"",
                msg_id="m-0003",
                **base,
            ),
        ),
        (
            "spawn_utf8_ids",
            "fleet.control.host-b",
            Envelope.new(
                kind=Kind.SPAWN,
                sender="host-a._gateway",
                to="host-b._gateway",
                body=b"\x00\x01\xff",
                msg_id="m-\u00e9",
                spawn_id="w-\u4e2d",
                **base,
            ),
        ),
        (
            "broadcast",
            "fleet.inbox.host-b",
            Envelope.new(
                kind=Kind.BROADCAST,
                sender="main-1",
                to="broadcast.reviewers",
                body=b"all hands",
                msg_id="m-0005",
                **base,
            ),
        ),
        (
            # a brief to an inject-mode worker: expiresAt is its sender's inject deadline
            # (ts + inject_deadline_s, here 30 s), docs/envelope.md "expiresAt"
            "brief_with_inject_deadline",
            "fleet.inbox.host-b",
            Envelope.new(
                kind=Kind.SEND,
                sender="main-1",
                to="worker-2",
                body=b"review the diff",
                msg_id="m-0006",
                **{**base, "ttl_s": 30},
            ),
        ),
    ]


def _header(name: str, value: bytes) -> dict[str, str]:
    out = {"name": name, "value_hex": value.hex()}
    if name != "sig":
        out["text"] = value.decode("utf-8")  # for readers; value_hex is authoritative
    return out


def build() -> dict[str, Any]:
    signer = Signer.from_seed(HOST, SEED, key_id=KEY_ID)
    vectors = []
    for name, topic, env in _cases():
        key, headers, value = encode(env, topic=topic, signer=signer)
        covered = {h: v for h, v in headers if h != "sig"}
        vectors.append(
            {
                "name": name,
                "topic": topic,
                "record_key_hex": key.hex(),
                "headers": [_header(h, v) for h, v in headers],
                "body_hex": value.hex(),
                "canonical_hex": canonical_bytes(covered, topic=topic, body=value).hex(),
                "signature_hex": dict(headers)["sig"].hex(),
            }
        )
    return {
        "format": "fleet-envelope-vectors/v1",
        "note": "Ed25519 (RFC 8032, pure). canonical form: docs/envelope.md",
        "host": HOST,
        "key_id": KEY_ID,
        "private_key_seed_hex": SEED.hex(),
        "public_key_hex": signer.public_key_bytes.hex(),
        "verify_at_ms": 1_767_225_610_000,
        "vectors": vectors,
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
