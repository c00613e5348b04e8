"""Sign and verify rates per core, and verify with 2 threads as a ratio to 1 thread.

``python -m bench envelope [--quick]``. The Ed25519 calls in cryptography release the GIL, so
verification should scale with threads up to the free cores; the parsing around it does not.
Baselines in the same run: raw Ed25519 verify (the crypto floor) and 1-thread verify. Beside
them, the pairwise MAC mode (docs/envelope.md): full ``Verifier.verify`` of MAC'd records and the
raw HMAC-SHA256, with the ratio to signed verify measured in the same run.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from pipeline.envelope import BoundedSeenSet, Envelope, Kind, Signer, TrustStore, Verifier, encode
from pipeline.envelope.canonical import canonical_bytes
from pipeline.presence import StaticPresence

BODY = b"x" * 1024
TOPIC = "fleet.inbox.b"


def _records(
    signer: Signer, n: int, pair: Any = None
) -> list[tuple[bytes, list[tuple[str, bytes]], bytes]]:
    out = []
    for _ in range(n):
        env = Envelope.new(kind=Kind.SEND, sender="w-a", to="m-b", body=BODY, ttl_s=3600)
        out.append(encode(env, topic=TOPIC, signer=signer, pair=pair))
    return out


def _rate(fn: Any, n: int) -> float:
    t0 = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - t0)


def main(quick: bool) -> dict[str, Any]:
    n = 2000 if quick else 20000
    signer = Signer.generate("a")
    trust = TrustStore()
    trust.add("a", signer.key_id, signer.public_key_bytes)
    verifier = Verifier(host="b", trust=trust, presence=StaticPresence({"w-a": "a"}),
                        seen=BoundedSeenSet())  # fmt: skip
    records = _records(signer, n)
    env = Envelope.new(kind=Kind.SEND, sender="w-a", to="m-b", body=BODY, ttl_s=3600)

    def sign(k: int) -> None:
        for _ in range(k):
            encode(env, topic=TOPIC, signer=signer)

    def verify(batch: list[Any]) -> None:
        for key, headers, value in batch:
            verifier.verify(topic=TOPIC, key=key, headers=headers, value=value)

    covered = {h: v for h, v in records[0][1] if h != "sig"}
    message = canonical_bytes(covered, topic=TOPIC, body=BODY)
    sig = dict(records[0][1])["sig"]
    public = trust.lookup(signer.key_id).key  # type: ignore[union-attr]

    def raw_verify(k: int) -> None:
        for _ in range(k):
            public.verify(sig, message)

    sign_rate = _rate(sign, n)
    raw_rate = _rate(raw_verify, n)
    one = _rate(lambda k: verify(records[:k]), n)

    def two_threads() -> float:
        halves = [records[: n // 2], records[n // 2 :]]
        threads = [threading.Thread(target=verify, args=(h,)) for h in halves]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return n / (time.perf_counter() - t0)

    two = two_threads()

    from bench.bench_runtime import pairings
    from pipeline.envelope.pairwise import mac

    sender, receiver = pairings(signer, trust, peer_host="b")
    pair = sender.seal("b")
    mac_records = _records(signer, n, pair)
    mac_verifier = Verifier(host="b", trust=trust, presence=StaticPresence({"w-a": "a"}),
                            seen=BoundedSeenSet(), pairing=receiver)  # fmt: skip

    def mac_verify(k: int) -> None:
        for key, headers, value in mac_records[:k]:
            mac_verifier.verify(topic=TOPIC, key=key, headers=headers, value=value)

    def raw_mac(k: int) -> None:
        for _ in range(k):
            mac(pair.key, message)  # type: ignore[union-attr]

    mac_one = _rate(mac_verify, n)
    raw_mac_rate = _rate(raw_mac, n)
    return {
        "n": n,
        "body_bytes": len(BODY),
        "cpus_visible": os.cpu_count(),
        "sign_per_s_1core": round(sign_rate),
        "verify_per_s_1core": round(one),
        "raw_ed25519_verify_per_s": round(raw_rate),
        "verify_vs_raw_ed25519_ratio": round(one / raw_rate, 3),
        "verify_per_s_2threads": round(two),
        "verify_2threads_vs_1thread_ratio": round(two / one, 3),
        "mac_verify_per_s_1core": round(mac_one),
        "raw_hmac_sha256_per_s": round(raw_mac_rate),
        "mac_verify_over_signed_verify": round(mac_one / one, 2),
        "verify_us_signed": round(1e6 / one, 1),
        "verify_us_mac": round(1e6 / mac_one, 1),
    }
