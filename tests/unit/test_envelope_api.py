"""The envelope API other subsystems code against: names and signatures."""

from __future__ import annotations

import dataclasses
import inspect

from pipeline import envelope
from pipeline.envelope import BoundedSeenSet, Envelope, Kind, SeenSet, Verifier


def test_exported_names_are_exactly_all() -> None:
    public = {n for n in dir(envelope) if not n.startswith("_")}
    modules = {
        "batch",
        "body",
        "canonical",
        "headers",
        "codec",
        "ed25519",
        "keys",
        "metrics",
        "model",
        "pairwise",
        "reasons",
        "receipts",
        "seen",
        "verify",
    }
    assert public - modules == set(envelope.__all__)


def test_contract_names_exist() -> None:
    for name in ("Kind", "Envelope", "Signer", "TrustStore", "encode", "PresenceView", "SeenSet",
                 "BoundedSeenSet", "Verified", "Verifier", "NOT_SIGNED", "SIG_INVALID",
                 "UNKNOWN_KEY", "SIGNER_MISMATCH", "TO_MISMATCH", "EXPIRED", "TTL_TOO_LONG",
                 "REPLAY", "MALFORMED_HEADERS", "TOO_LARGE", "SCHEMA_INVALID", "UNKNOWN_KIND",
                 "UNSUPPORTED_VERSION"):  # fmt: skip
        assert hasattr(envelope, name), name
    assert [k.value for k in Kind] == ["SEND", "REPLY", "ASK", "ANSWER", "TOO_LATE", "NO_WAITER",
        "ABANDONED", "FAILED", "INJECTED", "BROADCAST", "PRESENCE", "SPAWN", "STOP", "RECEIPTS"]  # fmt: skip


def test_envelope_and_verifier_signatures() -> None:
    fields = [f.name for f in dataclasses.fields(Envelope)]
    assert fields == ["kind", "msg_id", "trace_id", "sender", "to", "ts_ms", "expires_at_ms",
                      "body", "turn_id", "spawn_id", "v"]  # fmt: skip
    params = inspect.signature(Verifier.__init__).parameters
    assert list(params)[1:] == ["host", "trust", "presence", "seen", "topics", "max_ttl_s",
        "skew_s", "max_headers", "max_header_bytes", "max_body_bytes", "clock_ms", "pairing"]  # fmt: skip
    assert list(inspect.signature(Verifier.verify).parameters)[1:] == [
        "topic", "key", "headers", "value"]  # fmt: skip
    assert isinstance(BoundedSeenSet(), SeenSet)
