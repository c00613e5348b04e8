"""Verification at the receiving gateway, in the order R-ENV-3 fixes.

``verify`` runs these stages and stops at the first failure, raising
:class:`~pipeline.errors.EnvelopeError` with ``reason`` set and ``raw`` = the record as given:

1. bounds (header count, header bytes, key and body size) -- before any crypto   TOO_LARGE
2. header structure: ``sig`` present; no duplicate or look-alike reserved names;
   required headers present; ``v`` is a known canonical form; ``keyId`` trusted  NOT_SIGNED,
                                                  MALFORMED_HEADERS, UNSUPPORTED_VERSION, UNKNOWN_KEY
3. Ed25519 signature over the canonical bytes (raw header values, topic, body) SIG_INVALID
   -- or, for a record carrying ``mac`` instead of ``sig`` (the pairwise mode, :mod:`.pairwise`):
   the pair ``keyId`` names (UNKNOWN_PAIR), its HMAC over the same bytes (MAC_INVALID), and
   only a conversation kind on this host's inbox with the mode on here (MAC_NOT_ALLOWED)
   (except: a record in our inbox whose signature verifies for the inbox of the host presence
   places ``to`` on is authentic but copied here                                 TO_MISMATCH)
4. field syntax (signed, now safe to parse): kind, UTF-8 ids, decimal times   UNKNOWN_KIND,
                                                                               MALFORMED_HEADERS
5. ``from`` lives on the signing host per the last signed presence binding UNKNOWN_SENDER,
   (``<host>._gateway`` is valid exactly when <host> is the signer)         SIGNER_MISMATCH
   -- and a receipt (``INJECTED``, ``FAILED``, ``RECEIPTS``) only from a gateway  UNKNOWN_KIND
   -- a binding, not liveness: it changes by a tombstone or a newer binding, never because
   heartbeats went unheard during an outage (docs/presence.md "Two jobs")
6. ``to`` == record key, and the topic is this host's inbox (or its control
   topic, for records to ``<host>._gateway``); broadcast: key = to = broadcast.<group> TO_MISMATCH
7. not expired (``now <= expiresAt + skew``), ``ts`` not beyond ``now + skew``  EXPIRED, CLOCK_SKEW
8. ``expiresAt - ts`` <= max TTL                                              TTL_TOO_LONG
9. msgId not in the seen-set                                                  REPLAY

``verify_presence`` is the roster's entry point: stages 1-4, then kind PRESENCE, topic = roster,
key = ``to`` = ``from``, ``ts`` not in the future. It skips 5 (the signer *is* the authority
for "gid lives on my host"), expiry and replay (liveness is the roster's TTL; newest ts wins).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, runtime_checkable

from cryptography.exceptions import InvalidSignature

from pipeline.kafka.topics import TopicNames
from pipeline.support.clock import now_ms

from . import reasons as r
from .canonical import canonical_bytes
from .headers import RawHeaders, collect, fail, parse
from .keys import TrustedKey, TrustStore
from .model import Envelope
from .pairwise import MAC_KINDS, Pairing, UnknownPair, mac
from .seen import SeenSet


@runtime_checkable
class PresenceView(Protocol):
    """``host_of(gid)``: the host of gid's last signed binding; None when never announced or
    retracted by a tombstone."""

    def host_of(self, gid: str) -> str | None: ...


_GATEWAY_SUFFIX = r.GATEWAY_SUFFIX
_BROADCAST_PREFIX = r.BROADCAST_PREFIX
_BROADCAST = r.Kind.BROADCAST
_GATEWAY_KINDS = r.GATEWAY_KINDS


@dataclass(frozen=True, slots=True)
class Verified:
    envelope: Envelope
    signer_host: str
    key_id: str


class Verifier:
    """R-ENV-4 + R-ENV-7: nothing crosses hosts unsigned; every rejection is explicit."""

    def __init__(
        self,
        *,
        host: str,
        trust: TrustStore,
        presence: PresenceView,
        seen: SeenSet,
        topics: TopicNames = TopicNames(),
        max_ttl_s: float = 86400,
        skew_s: float = 30,
        max_headers: int = 32,
        max_header_bytes: int = 8192,
        max_body_bytes: int = 1_048_576,
        clock_ms: Callable[[], int] = now_ms,
        pairing: Pairing | None = None,
    ) -> None:
        self.host = host
        self.pairing = pairing  # None: the pairwise MAC mode is off here (MAC_NOT_ALLOWED)
        self.trust = trust
        self.presence = presence
        self.seen = seen
        self.topics = topics
        self.max_ttl_ms = round(max_ttl_s * 1000)
        self.skew_ms = round(skew_s * 1000)
        self.max_headers = max_headers
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.clock_ms = clock_ms
        self._inbox = topics.inbox(host)
        self._control = topics.control(host)
        self._own_gateway = f"{host}{r.GATEWAY_SUFFIX}"

    # -- public entry points ---------------------------------------------------------------
    def verify(
        self,
        *,
        topic: str,
        key: bytes | None,
        headers: RawHeaders | None,
        value: bytes | None,
    ) -> Verified:
        """Stages 1-9 (the module docstring). Stages 5-9 read straight through, each failure
        raised where its check is: this runs once per record on the consume path."""
        raw = {"topic": topic, "key": key, "headers": headers, "value": value}
        env, signer_host, key_id = self._authentic(topic, key, headers, value, raw, route=True)
        sender, to = env.sender, env.to
        # 5: the sender lives on the signing host (a gateway's own id: exactly that host)
        if sender.endswith(_GATEWAY_SUFFIX):
            if sender != f"{signer_host}{_GATEWAY_SUFFIX}":
                fail(r.SIGNER_MISMATCH, f"{sender} signed by {signer_host}", raw, env)
        else:
            if env.kind in _GATEWAY_KINDS:  # receipts settle tracked sends (docs/envelope.md)
                fail(r.UNKNOWN_KIND, f"kind {env.kind} from {sender}, not a gateway", raw, env)
            lives_on = self.presence.host_of(sender)
            if lives_on != signer_host:
                self._wrong_sender(env, signer_host, lives_on, raw)
        # 6: addressed to the record key, on this host's inbox (or control topic)
        if key is None or key != to.encode():
            fail(r.TO_MISMATCH, f"record key {key!r} != to {to!r}", raw, env)
        if to.startswith(_BROADCAST_PREFIX) != (env.kind is _BROADCAST):
            fail(r.TO_MISMATCH, f"kind {env.kind} with to {to!r}", raw, env)
        if topic != self._inbox and (topic != self._control or to != self._own_gateway):
            fail(r.TO_MISMATCH, f"topic {topic!r} is not {self.host}'s inbox", raw, env)
        # 7-9: time, then replay
        now = self.clock_ms()
        expires, ts = env.expires_at_ms, env.ts_ms
        if now > expires + self.skew_ms:
            fail(r.EXPIRED, f"expired {now - expires} ms ago", raw, env)
        if ts > now + self.skew_ms:
            fail(r.CLOCK_SKEW, f"ts {ts - now} ms in the future", raw, env)
        if expires - ts > self.max_ttl_ms or expires < ts:
            fail(r.TTL_TOO_LONG, f"ttl {expires - ts} ms", raw, env)
        if self.seen.contains(env.msg_id):
            fail(r.REPLAY, f"msgId {env.msg_id} already seen", raw, env)
        return Verified(env, signer_host, key_id)

    def verify_presence(
        self,
        *,
        topic: str,
        key: bytes | None,
        headers: RawHeaders | None,
        value: bytes | None,
    ) -> Verified:
        raw = {"topic": topic, "key": key, "headers": headers, "value": value}
        env, signer_host, key_id = self._authentic(topic, key, headers, value, raw, route=False)
        if env.kind is not r.Kind.PRESENCE:
            fail(r.UNKNOWN_KIND, f"kind {env.kind} on the roster", raw, env)
        if topic != self.topics.roster or key is None or key != env.to.encode("utf-8"):
            fail(r.TO_MISMATCH, "presence must be keyed by its gid on the roster", raw, env)
        if env.to != env.sender:
            fail(r.TO_MISMATCH, "presence 'from' and 'to' must both be the gid", raw, env)
        self._check_not_future(env, self.clock_ms(), raw)
        return Verified(envelope=env, signer_host=signer_host, key_id=key_id)

    # -- stages -----------------------------------------------------------------------------
    def _authentic(
        self,
        topic: str,
        key: bytes | None,
        headers: RawHeaders | None,
        value: bytes | None,
        raw: dict[str, Any],
        *,
        route: bool,
    ) -> tuple[Envelope, str, str]:
        """Stages 1-4: the envelope, the host that vouched for it and the key id it names."""
        body = value if type(value) is bytes else b"" if value is None else bytes(value)
        fields = collect(
            key,
            headers,
            body,
            raw,
            max_headers=self.max_headers,
            max_header_bytes=self.max_header_bytes,
            max_body_bytes=self.max_body_bytes,
        )
        if r.H_MAC in fields:
            return self._mac_authentic(fields, topic, body, raw, route=route)
        trusted = self.trust.lookup_raw(fields[r.H_KEY_ID]) or self._key(fields, raw)
        try:
            message = canonical_bytes(fields, topic=topic, body=body)
        except UnicodeEncodeError:  # not a name a broker would hand us
            fail(r.TO_MISMATCH, f"topic {topic!r} is not valid UTF-8", raw)
        try:
            trusted.key.verify(fields[r.H_SIG], message)
        except InvalidSignature:
            signed_for = self._signed_for(fields, topic, body, trusted) if route else None
            if signed_for is not None:
                fail(r.TO_MISMATCH, f"authentic record for {signed_for} found on {topic}", raw)
            fail(r.SIG_INVALID, f"signature does not verify under {trusted.key_id}", raw)
        return parse(fields, body, raw), trusted.host, trusted.key_id

    def _mac_authentic(
        self, fields: dict[str, bytes], topic: str, body: bytes, raw: dict[str, Any], *, route: bool
    ) -> tuple[Envelope, str, str]:
        """Stages 2-4 of a MAC'd record: the pair its ``keyId`` names (the peer host comes from
        the agreement key its signed presence published, never from the record), the tag over
        the same canonical bytes a signature covers, then only conversation kinds on our inbox."""
        if self.pairing is None or not route:
            what = "presence" if not route else f"{self.host} (the pairwise mode is off)"
            fail(r.MAC_NOT_ALLOWED, f"a MAC'd record is not accepted for {what}", raw)
        try:
            pair = self.pairing.open(fields[r.H_KEY_ID])
        except UnknownPair as exc:
            fail(r.UNKNOWN_PAIR, str(exc), raw)
        try:
            message = canonical_bytes(fields, topic=topic, body=body)
        except UnicodeEncodeError:
            fail(r.TO_MISMATCH, f"topic {topic!r} is not valid UTF-8", raw)
        if not hmac.compare_digest(mac(pair.key, message), fields[r.H_MAC]):
            fail(r.MAC_INVALID, f"mac does not verify for the pair with {pair.host}", raw)
        env = parse(fields, body, raw)
        if env.kind not in MAC_KINDS or topic != self._inbox:
            fail(r.MAC_NOT_ALLOWED, f"{env.kind} on {topic} must be signed", raw, env)
        return env, pair.host, fields[r.H_KEY_ID].decode("utf-8")

    def _signed_for(
        self, fields: dict[str, bytes], topic: str, body: bytes, trusted: TrustedKey
    ) -> str | None:
        """Diagnose a copy into the wrong inbox. The topic is signed, so a record copied from
        host B's inbox into ours fails the signature; if it verifies for the inbox of the host
        presence places ``to`` on, it is authentic but misrouted: TO_MISMATCH, not tampering.
        At most one extra verify, only for records sitting in our own inbox."""
        if topic != self._inbox:
            return None
        try:
            host = self.presence.host_of(fields[r.H_TO].decode("utf-8"))
        except UnicodeDecodeError:
            return None
        if host is None or host == self.host:
            return None
        other = self.topics.inbox(host)
        try:
            trusted.key.verify(fields[r.H_SIG], canonical_bytes(fields, topic=other, body=body))
        except InvalidSignature:
            return None
        return other

    def _key(self, fields: dict[str, bytes], raw: dict[str, Any]) -> TrustedKey:
        try:
            key_id = fields[r.H_KEY_ID].decode("utf-8")
        except UnicodeDecodeError:
            fail(r.MALFORMED_HEADERS, "keyId is not UTF-8", raw)
        trusted = self.trust.lookup(key_id)
        if trusted is None:
            fail(r.UNKNOWN_KEY, f"key {key_id!r} is not trusted", raw)
        return trusted

    def _wrong_sender(
        self, env: Envelope, signer_host: str, lives_on: str | None, raw: dict[str, Any]
    ) -> NoReturn:
        """Stage 5's refusal: no binding for the sender, or one on another host."""
        if lives_on is None:
            fail(
                r.UNKNOWN_SENDER,
                f"no signed presence binding for {env.sender} (never announced, or tombstoned)",
                raw,
                env,
            )
        fail(
            r.SIGNER_MISMATCH,
            f"{env.sender} lives on {lives_on} but {signer_host} signed",
            raw,
            env,
        )

    def _check_not_future(self, env: Envelope, now: int, raw: dict[str, Any]) -> None:
        if env.ts_ms > now + self.skew_ms:
            fail(r.CLOCK_SKEW, f"ts {env.ts_ms - now} ms in the future", raw, env)
