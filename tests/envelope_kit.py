"""Shared set-up for envelope tests: three hosts' keys, a trust store, a fixed clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.envelope import (
    GATEWAY_KINDS,
    BoundedSeenSet,
    Envelope,
    Kind,
    Signer,
    TrustStore,
    Verifier,
    encode,
)
from pipeline.kafka.topics import TopicNames
from pipeline.presence import StaticPresence

NOW = 1_767_225_600_000


@dataclass
class Fleet:
    """Hosts a, b, c with keys; gids w-a (on a), m-b (on b), m-c (on c)."""

    topics: TopicNames = field(default_factory=TopicNames)
    signers: dict[str, Signer] = field(default_factory=dict)
    trust: TrustStore = field(default_factory=TrustStore)
    presence: StaticPresence = field(
        default_factory=lambda: StaticPresence({"w-a": "a", "m-b": "b", "m-c": "c"})
    )
    seen: BoundedSeenSet = field(default_factory=BoundedSeenSet)
    now: int = NOW

    def __post_init__(self) -> None:
        for host in ("a", "b", "c"):
            s = Signer.from_seed(host, bytes([ord(host)]) * 32)
            self.signers[host] = s
            self.trust.add(host, s.key_id, s.public_key_bytes)

    def verifier(self, host: str, **kw: Any) -> Verifier:
        return Verifier(
            host=host,
            trust=self.trust,
            presence=self.presence,
            seen=self.seen,
            topics=self.topics,
            clock_ms=lambda: self.now,
            **kw,
        )

    def envelope(self, **kw: Any) -> Envelope:
        args: dict[str, Any] = {
            "kind": Kind.SEND,
            "sender": "w-a",
            "to": "m-b",
            "body": b"brief",
            "ttl_s": 60,
            "now_ms": self.now,
        }
        if "sender" not in kw and kw.get("kind") in GATEWAY_KINDS:
            args["sender"] = "a._gateway"  # a receipt comes from host a's gateway
        args.update(kw)
        return Envelope.new(**args)

    def record(
        self, env: Envelope | None = None, *, signer: str = "a", host: str = "b"
    ) -> dict[str, Any]:
        env = env or self.envelope()
        topic = self.topics.inbox(host)
        key, headers, value = encode(env, topic=topic, signer=self.signers[signer])
        return {"topic": topic, "key": key, "headers": headers, "value": value}
