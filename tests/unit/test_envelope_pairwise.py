"""The pairwise MAC mode (docs/envelope.md, "The pairwise MAC mode").

R-ENV-3 still holds for a MAC'd record: nothing crosses hosts without a tag a trusted
identity vouches for, and every refusal is explicit with a stable reason. The agreement keys
travel in signed presence, so these tests publish them through the real roster view.
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.envelope import (
    AgreementKey,
    Envelope,
    Kind,
    Pairing,
    encode,
    seal_fields,
    sign_fields,
)
from pipeline.envelope import reasons as r
from pipeline.envelope.pairwise import MAC_KINDS, PeerKey, StaticPeerKeys, pair_key
from pipeline.errors import EnvelopeError
from pipeline.host.outbound import Publisher
from pipeline.presence import (
    Delivery,
    PresenceEntry,
    Role,
    RosterView,
    gateway_gid,
    presence_record,
)
from tests.envelope_kit import Fleet


class Mesh:
    """Hosts a, b, c of :class:`Fleet`; each gateway's agreement key published through its
    signed presence into one roster view (every host reads the same roster)."""

    def __init__(self) -> None:
        self.f = Fleet()
        self.roster = RosterView(verifier=self.f.verifier("roster"), clock_ms=lambda: self.f.now)
        self.keys = {h: AgreementKey.from_signer(s) for h, s in self.f.signers.items()}
        self.pairings = {
            h: Pairing(own=k, peers=self.roster, trusted=self.f.trust.lookup)
            for h, k in self.keys.items()
        }
        for h in ("a", "b", "c"):
            self.publish(h, self.keys[h].public_bytes)

    def publish(self, host: str, public: bytes | None, *, ts: int | None = None) -> Any:
        e = PresenceEntry(
            gid=gateway_gid(host),
            host=host,
            role=Role.GATEWAY,
            delivery=Delivery.NONE,
            ts_ms=self.f.now if ts is None else ts,
            ttl_ms=30_000,
            agreement_key=public,
        )
        key, headers, value = presence_record(e, signer=self.f.signers[host], topics=self.f.topics)
        return self.roster.apply(topic=self.f.topics.roster, key=key, headers=headers, value=value)

    def verifier(self, host: str, *, mode: bool = True) -> Any:
        return self.f.verifier(host, pairing=self.pairings[host] if mode else None)

    def record(
        self, env: Envelope | None = None, *, sender: str = "a", host: str = "b"
    ) -> dict[str, Any]:
        env = env or self.f.envelope()
        topic = self.f.topics.inbox(host)
        pair = self.pairings[sender].seal(host)
        assert pair is not None
        key, headers, value = encode(env, topic=topic, signer=self.f.signers[sender], pair=pair)
        return {"topic": topic, "key": key, "headers": headers, "value": value}


def refused(verifier: Any, rec: dict[str, Any]) -> str:
    with pytest.raises(EnvelopeError) as info:
        verifier.verify(**rec)
    assert info.value.raw is not None and info.value.raw["headers"] == rec["headers"]
    return info.value.reason


def with_header(rec: dict[str, Any], name: str, value: bytes | None) -> dict[str, Any]:
    headers = [(n, v) for n, v in rec["headers"] if n != name]
    if value is not None:
        headers.append((name, value))
    return {**rec, "headers": headers}


# -- key agreement ---------------------------------------------------------------------------
def test_both_ends_derive_the_same_pair_key_and_every_pair_its_own() -> None:
    m = Mesh()
    a, b, c = m.keys["a"], m.keys["b"], m.keys["c"]
    ab = pair_key(a, "b", b.public_bytes)
    assert ab == pair_key(b, "a", a.public_bytes) and len(ab) == 32
    assert pair_key(a, "c", c.public_bytes) != ab
    assert pair_key(b, "c", c.public_bytes) not in (ab, pair_key(a, "c", c.public_bytes))
    # the host ids are in the derivation: the same X25519 keys under other names differ
    assert pair_key(a, "x", b.public_bytes) != ab


def test_the_agreement_key_is_derived_from_the_host_key_and_stable_across_restarts() -> None:
    f = Fleet()
    one, two = AgreementKey.from_signer(f.signers["a"]), AgreementKey.from_signer(f.signers["a"])
    assert one.public_bytes == two.public_bytes and one.key_id.startswith("a.")
    assert one.public_bytes != AgreementKey.from_signer(f.signers["b"]).public_bytes
    assert "private" not in repr(one) and one.public_bytes.hex() not in repr(one)


def test_a_low_order_peer_key_is_never_used() -> None:
    f = Fleet()
    own = AgreementKey.from_signer(f.signers["a"])
    zero = PeerKey(host="b", key_id="b.zero", public_bytes=bytes(32), vouched_by="x")
    pairing = Pairing(own=own, peers=StaticPeerKeys(zero), trusted=lambda _k: object())
    assert pairing.seal("b") is None


# -- the happy path --------------------------------------------------------------------------
def test_a_mac_record_verifies_with_the_host_its_signed_presence_names() -> None:
    m = Mesh()
    rec = m.record()
    names = [n for n, _ in rec["headers"]]
    assert names[-1] == "mac" and "sig" not in names
    key_id = dict(rec["headers"])["keyId"].decode()
    assert key_id == f"{m.keys['a'].key_id}/{m.keys['b'].key_id}"
    got = m.verifier("b").verify(**rec)
    assert got.signer_host == "a" and got.key_id == key_id
    assert got.envelope.sender == "w-a" and got.envelope.body == b"brief"


def test_signed_records_still_verify_with_the_mode_on() -> None:
    m = Mesh()
    assert m.verifier("b").verify(**m.f.record()).signer_host == "a"


# -- refusals --------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["body", "msgId", "topic", "expiresAt"])
def test_a_tampered_mac_record_is_mac_invalid(where: str) -> None:
    m = Mesh()
    rec = m.record()
    if where == "body":
        rec = {**rec, "value": b"brieF"}
    elif where == "topic":
        rec = {**rec, "topic": m.f.topics.inbox("b") + "x"}
    else:
        rec = with_header(rec, where, dict(rec["headers"])[where] + b"0")
    assert refused(m.verifier("b"), rec) == r.MAC_INVALID


def test_a_short_or_flipped_tag_is_mac_invalid() -> None:
    m = Mesh()
    rec = m.record()
    tag = dict(rec["headers"])["mac"]
    assert refused(m.verifier("b"), with_header(rec, "mac", tag[:31])) == r.MAC_INVALID
    flipped = bytes([tag[0] ^ 1]) + tag[1:]
    assert refused(m.verifier("b"), with_header(rec, "mac", flipped)) == r.MAC_INVALID


def test_both_tags_is_malformed_and_no_tag_is_not_signed() -> None:
    m = Mesh()
    rec = m.record()
    both = {**rec, "headers": [*rec["headers"], ("sig", bytes(64))]}
    assert refused(m.verifier("b"), both) == r.MALFORMED_HEADERS
    assert refused(m.verifier("b"), with_header(rec, "mac", None)) == r.NOT_SIGNED


def test_a_sender_key_no_signed_presence_published_is_unknown_pair() -> None:
    m = Mesh()
    stranger = AgreementKey.generate("a")  # a's host name, a key a never published
    pair = Pairing(own=stranger, peers=m.roster, trusted=m.f.trust.lookup).seal("b")
    assert pair is not None
    env = m.f.envelope()
    key, headers, value = encode(
        env, topic=m.f.topics.inbox("b"), signer=m.f.signers["a"], pair=pair
    )
    rec = {"topic": m.f.topics.inbox("b"), "key": key, "headers": headers, "value": value}
    assert refused(m.verifier("b"), rec) == r.UNKNOWN_PAIR


def test_a_record_for_another_recipients_pair_is_unknown_pair() -> None:
    m = Mesh()
    rec = m.record(host="c")  # a -> c, then copied into b's inbox
    rec = {**rec, "topic": m.f.topics.inbox("b")}
    assert refused(m.verifier("b"), rec) == r.UNKNOWN_PAIR
    assert refused(m.verifier("b"), with_header(rec, "keyId", b"junk")) == r.UNKNOWN_PAIR
    assert refused(m.verifier("b"), with_header(rec, "keyId", b"\xff/\xfe")) == r.UNKNOWN_PAIR


def test_untrusting_the_host_key_withdraws_its_agreement_key_both_ways() -> None:
    """A compromised host key: ``fleet keys untrust`` also ends its MAC'd records."""
    m = Mesh()
    rec = m.record()
    m.f.trust.remove(m.f.signers["a"].key_id)
    assert refused(m.verifier("b"), rec) == r.UNKNOWN_PAIR
    assert m.pairings["b"].seal("a") is None  # and b no longer MACs anything for a


def test_the_mode_off_refuses_a_mac_record_mac_not_allowed() -> None:
    m = Mesh()
    assert refused(m.verifier("b", mode=False), m.record()) == r.MAC_NOT_ALLOWED


@pytest.mark.parametrize("kind", sorted(set(Kind) - MAC_KINDS))
def test_a_kind_that_must_be_signed_is_mac_not_allowed(kind: Kind) -> None:
    m = Mesh()
    extra: dict[str, Any] = {"to": "broadcast.g"} if kind is Kind.BROADCAST else {}
    rec = m.record(m.f.envelope(kind=kind, **extra))
    assert refused(m.verifier("b"), rec) == r.MAC_NOT_ALLOWED


def test_a_mac_record_on_the_control_topic_or_the_roster_is_mac_not_allowed() -> None:
    m = Mesh()
    env = m.f.envelope(sender="a._gateway", to="b._gateway")
    pair = m.pairings["a"].seal("b")
    assert pair is not None
    topic = m.f.topics.control("b")
    headers = seal_fields(env.header_fields(), topic=topic, body=env.body, pair=pair)
    rec = {"topic": topic, "key": b"b._gateway", "headers": headers, "value": env.body}
    assert refused(m.verifier("b"), rec) == r.MAC_NOT_ALLOWED
    with pytest.raises(EnvelopeError) as info:
        m.verifier("b").verify_presence(**{**rec, "topic": m.f.topics.roster})
    assert info.value.reason == r.MAC_NOT_ALLOWED


def test_replay_expiry_and_sender_binding_stay_as_for_signed_records() -> None:
    m = Mesh()
    rec = m.record()
    m.f.seen.add(m.verifier("b").verify(**rec).envelope.msg_id)
    assert refused(m.verifier("b"), rec) == r.REPLAY
    m.f.now += 61_000 + 30_000
    assert refused(m.verifier("b"), m.record(m.f.envelope(now_ms=m.f.now - 200_000))) == r.EXPIRED
    # c holds a key with b, not with a: it cannot speak for a's worker to b
    forged = m.record(m.f.envelope(sender="w-a"), sender="c")
    assert refused(m.verifier("b"), forged) == r.SIGNER_MISMATCH
    ghost = m.record(m.f.envelope(sender="ghost"))
    assert refused(m.verifier("b"), ghost) == r.UNKNOWN_SENDER


# -- rotation --------------------------------------------------------------------------------
def test_a_new_agreement_key_in_presence_rotates_the_pair_and_the_old_one_still_opens() -> None:
    m = Mesh()
    before = m.record()
    old_b = m.keys["b"]
    new_b = AgreementKey.generate("b")
    m.pairings["b"] = Pairing(
        own=new_b, peers=m.roster, trusted=m.f.trust.lookup, previous=(old_b,)
    )
    m.f.now += 1
    assert m.publish("b", new_b.public_bytes) is not None
    pair = m.pairings["a"].seal("b")
    assert pair is not None and pair.peer.key_id == new_b.key_id
    assert pair.key == pair_key(new_b, "a", m.keys["a"].public_bytes)
    after = m.record(m.f.envelope())
    assert m.verifier("b").verify(**after).signer_host == "a"
    assert m.verifier("b").verify(**before).signer_host == "a", "in flight across the rotation"


def test_a_sender_rotation_keeps_its_previous_key_readable_but_not_the_one_before() -> None:
    m = Mesh()
    first = m.record()
    for step in (1, 2):
        m.keys["a"] = AgreementKey.generate("a")
        m.pairings["a"] = Pairing(own=m.keys["a"], peers=m.roster, trusted=m.f.trust.lookup)
        assert m.publish("a", m.keys["a"].public_bytes, ts=m.f.now + step) is not None
        if step == 1:
            assert m.verifier("b").verify(**first).signer_host == "a"
    assert refused(m.verifier("b"), first) == r.UNKNOWN_PAIR  # two rotations later


def test_an_older_presence_never_brings_back_an_old_key_and_mode_off_stops_sealing() -> None:
    m = Mesh()
    current = m.roster.current_agreement("a")
    assert m.publish("a", AgreementKey.generate("a").public_bytes, ts=m.f.now - 1) is None
    assert m.roster.current_agreement("a") == current
    m.f.now += 1
    assert m.publish("a", None) is not None  # a's gateway restarted with the mode off
    assert m.pairings["b"].seal("a") is None
    assert m.roster.agreement(m.keys["a"].key_id) is not None  # still opens records in flight


def test_an_agreement_key_on_an_agent_entry_or_of_the_wrong_size_is_refused() -> None:
    m = Mesh()
    agent = PresenceEntry(
        gid="w-a", host="a", role=Role.WORKER, delivery=Delivery.INJECT, ts_ms=m.f.now,
        ttl_ms=30_000, agreement_key=bytes(32),
    )  # fmt: skip
    key, headers, value = presence_record(agent, signer=m.f.signers["a"], topics=m.f.topics)
    assert m.roster.apply(topic=m.f.topics.roster, key=key, headers=headers, value=value) is None
    m.f.now += 1
    assert m.publish("a", b"short") is None
    assert m.roster.rejections[r.SCHEMA_INVALID] == 2


# -- the sending side ------------------------------------------------------------------------
def test_the_publisher_macs_conversation_kinds_for_hosts_with_a_key_and_signs_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = Mesh()
    rows: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "pipeline.host.outbound.outbox.write", lambda _s, **kw: rows.append(kw) or len(rows)
    )
    pub = Publisher(host="a", signer=m.f.signers["a"], topics=m.f.topics, pairing=m.pairings["a"])
    m.f.now += 1
    assert m.publish("c", None) is not None  # c's mode is off
    pub.stage(None, m.f.envelope(), to_host="b")  # type: ignore[arg-type]
    pub.stage(None, m.f.envelope(kind=Kind.FAILED), to_host="b")  # type: ignore[arg-type]
    pub.stage(None, m.f.envelope(to="m-c"), to_host="c")  # type: ignore[arg-type]
    tags = [[n for n, _ in row["headers"]][-1] for row in rows]
    assert tags == ["mac", "sig", "sig"]
    assert m.verifier("b").verify(**{k: rows[0][k] for k in ("topic", "key", "headers", "value")})


def test_sign_fields_and_seal_fields_cover_the_same_bytes_under_different_tags() -> None:
    m = Mesh()
    env = m.f.envelope()
    pair = m.pairings["a"].seal("b")
    assert pair is not None
    topic = m.f.topics.inbox("b")
    sealed = dict(seal_fields(env.header_fields(), topic=topic, body=env.body, pair=pair))
    signed = dict(
        sign_fields(env.header_fields(), topic=topic, body=env.body, signer=m.f.signers["a"])
    )
    assert {k: v for k, v in sealed.items() if k not in ("mac", "keyId")} == {
        k: v for k, v in signed.items() if k not in ("sig", "keyId")
    }
