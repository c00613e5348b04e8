"""The union roster view (R-PRES-2; R-ENV-7's roster check rests on it).

Built from the compacted roster topic: every record is verified with
:meth:`~pipeline.envelope.Verifier.verify_presence`, its body must name the signing host, and
the newest record per gid wins: by ``(incarnation, ts)`` among one host's records, by ``ts``
across hosts (:meth:`PresenceEntry.older_than`).

Presence answers two questions (docs/presence.md):

* **authenticity** -- :meth:`RosterView.host_of` is the last signed gid -> host *binding*. It
  changes only through a tombstone or a newer signed binding, never because time passed while
  nobody could hear (R-PRES-4 rests on it);
* **routing / liveness** -- an entry is live while ``ts + ttl`` is not behind the follower's
  *horizon* (the moment up to which it has read the whole roster), not the clock: an outage
  that silences heartbeats does not make anyone lapse; one TTL of silence that the follower
  could have heard does.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

from pipeline import schemas
from pipeline.envelope import (
    SCHEMA_INVALID,
    SIGNER_MISMATCH,
    TO_MISMATCH,
    TTL_TOO_LONG,
    BoundedSeenSet,
    TrustStore,
    Verifier,
)
from pipeline.envelope.headers import RawHeaders
from pipeline.envelope.keys import key_id_for
from pipeline.envelope.pairwise import PUBLIC_LEN, PeerKey
from pipeline.errors import EnvelopeError
from pipeline.kafka.topics import TopicNames
from pipeline.support.clock import now_ms

from .freshness import Freshness
from .model import SCHEMA, PresenceEntry, Role, gateway_gid
from .static import StaticPresence

log = logging.getLogger(__name__)

MAX_GONE = 100_000  # departures remembered (the oldest forgotten first: then UNKNOWN_RECIPIENT)
AGREEMENT_KEPT = 2  # a host's current agreement key and its previous one (records in flight)
MAX_RETRACTED = 100_000  # retracted records remembered as a floor (the oldest forgotten first)


class RosterView:
    """Implements :class:`~pipeline.envelope.PresenceView`: ``host_of(gid)`` is the last signed
    binding; :meth:`is_live` / :meth:`entries` judge liveness against the follower's horizon.

    Rejects presence not signed by the host it claims (``SIGNER_MISMATCH``), a tombstone for an
    entry another host owns, and anything the verifier rejects; rejections are counted by
    reason in :attr:`rejections` and logged, never raised."""

    def __init__(
        self,
        *,
        verifier: Verifier,
        clock_ms: Callable[[], int] = now_ms,
        max_ttl_ms: int = 600_000,
    ) -> None:
        self._verifier = verifier
        self._clock = clock_ms
        self._max_ttl_ms = max_ttl_ms  # a silent host's claims must lapse in bounded time
        self._entries: dict[str, PresenceEntry] = {}
        self._gone: dict[str, PresenceEntry] = {}  # departure records of reaped workers
        # the last record of each retracted gid: a late record of an older incarnation of its
        # host must not bring it back (a zombie's heartbeat after the survivor's tombstone)
        self._retracted: dict[str, PresenceEntry] = {}
        self._lock = threading.Lock()
        self._freshness = Freshness()
        self.rejections: Counter[str] = Counter()
        # the pairwise MAC mode's peer keys, from signed gateway entries (PeerKeys)
        self._agreement_by_host: dict[str, list[PeerKey]] = {}  # newest last
        self._agreement_current: dict[str, PeerKey] = {}  # hosts whose mode is on now
        self._agreement_by_id: dict[str, PeerKey] = {}
        # authentic records that lost to a newer one, by what decided: "incarnation" (an older
        # run of the host) or "ts" (an older heartbeat of the same run, or another host's)
        self.superseded: Counter[str] = Counter()

    @classmethod
    def build(
        cls,
        *,
        trust: TrustStore,
        topics: TopicNames = TopicNames(),
        skew_s: float = 30,
        clock_ms: Callable[[], int] = now_ms,
        max_ttl_ms: int = 600_000,
    ) -> RosterView:
        """A view with its own presence verifier (only ``verify_presence`` is used, which
        needs neither a presence view nor a seen-set)."""
        verifier = Verifier(
            host="roster",
            trust=trust,
            presence=StaticPresence(),
            seen=BoundedSeenSet(1),
            topics=topics,
            skew_s=skew_s,
            clock_ms=clock_ms,
        )
        return cls(verifier=verifier, clock_ms=clock_ms, max_ttl_ms=max_ttl_ms)

    # -- feeding --------------------------------------------------------------------------------
    def apply(
        self,
        *,
        topic: str,
        key: bytes | None,
        headers: RawHeaders | None,
        value: bytes | None,
    ) -> PresenceEntry | None:
        """Apply one roster record; returns the accepted entry (None for tombstones/rejects)."""
        try:
            verified = self._verifier.verify_presence(
                topic=topic, key=key, headers=headers, value=value
            )
            env = verified.envelope
            if not env.body:
                self._retract(env.sender, verified.signer_host, raw=value)
                return None
            entry = PresenceEntry.from_record(schemas.decode(SCHEMA, env.body))
            self._check_claim(entry, env.sender, verified.signer_host)
            peer_key = self._peer_key(entry, verified.key_id)
        except EnvelopeError as exc:
            self.rejections[exc.reason] += 1
            log.warning("roster: rejected presence record key=%r: %s", key, exc)
            return None
        with self._lock:
            by = self._superseded_by(entry)
            if by is not None:
                self.superseded[by] += 1
                return None
            self._retracted.pop(entry.gid, None)
            if entry.gone is not None:  # a departure: the binding goes, its cause stays
                self._entries.pop(entry.gid, None)
                self._gone[entry.gid] = entry
                if len(self._gone) > MAX_GONE:
                    self._gone.pop(next(iter(self._gone)))  # the oldest departure
                return None
            current = self._entries.get(entry.gid)
            if current is not None and current.host != entry.host:
                log.warning("roster: %s moved from %s to %s", entry.gid, current.host, entry.host)
            self._entries[entry.gid] = entry
            self._gone.pop(entry.gid, None)  # bound again: no longer gone
            if peer_key is not None:
                self._publish_agreement(peer_key)
            elif entry.is_gateway:  # the mode is off there now: seal nothing more for it
                self._agreement_current.pop(entry.host, None)
        return entry

    def _peer_key(self, entry: PresenceEntry, vouched_by: str) -> PeerKey | None:
        """The agreement key a gateway entry publishes, bound to the host key that signed it."""
        raw = entry.agreement_key
        if raw is None:
            return None
        if not entry.is_gateway or len(raw) != PUBLIC_LEN:
            raise EnvelopeError(
                f"agreement key on {entry.gid}: only a gateway entry, {PUBLIC_LEN} bytes",
                reason=SCHEMA_INVALID,
            )
        return PeerKey(
            host=entry.host,
            key_id=key_id_for(entry.host, raw),
            public_bytes=raw,
            vouched_by=vouched_by,
        )

    def _publish_agreement(self, key: PeerKey) -> None:
        """Under the lock: ``key`` becomes its host's current one; the previous stays readable
        by id (records MAC'd before a peer saw the new key), older ones are forgotten."""
        kept = [k for k in self._agreement_by_host.get(key.host, []) if k.key_id != key.key_id]
        kept.append(key)
        for old in kept[:-AGREEMENT_KEPT]:
            self._agreement_by_id.pop(old.key_id, None)
        self._agreement_by_host[key.host] = kept[-AGREEMENT_KEPT:]
        self._agreement_by_id[key.key_id] = key
        self._agreement_current[key.host] = key

    def _superseded_by(self, entry: PresenceEntry) -> str | None:
        """What makes ``entry`` lose, or None when it applies (called under the lock).

        While ``gid`` is bound, an older record (replayed, reordered, or from an older run of the
        host) never wins. Once its host retracted or departed it, only an older *incarnation* of
        that host is refused: a zombie's late heartbeat must not bring back what the newer run
        took away, while the same run may announce the gid again whatever its clock says."""
        current = self._entries.get(entry.gid)
        if current is not None:
            if not entry.older_than(current):
                return None
            return "incarnation" if entry.incarnation != current.incarnation else "ts"
        floor = self._gone.get(entry.gid) or self._retracted.get(entry.gid)
        if floor is not None and floor.host == entry.host and entry.incarnation < floor.incarnation:
            return "incarnation"
        return None

    def _check_claim(self, entry: PresenceEntry, sender: str, signer_host: str) -> None:
        if not 0 < entry.ttl_ms <= self._max_ttl_ms:
            raise EnvelopeError(f"presence ttl {entry.ttl_ms} ms", reason=TTL_TOO_LONG)
        if entry.gid != sender:
            raise EnvelopeError(f"body gid {entry.gid} != from {sender}", reason=TO_MISMATCH)
        if entry.host != signer_host:
            raise EnvelopeError(
                f"presence for {entry.gid} claims host {entry.host}, signed by {signer_host}",
                reason=SIGNER_MISMATCH,
            )
        if entry.is_gateway != (entry.gid == gateway_gid(entry.host)):
            raise EnvelopeError(f"bad gateway entry {entry.gid}", reason=SIGNER_MISMATCH)

    def _retract(self, gid: str, signer_host: str, *, raw: bytes | None) -> None:
        with self._lock:
            current = self._entries.get(gid)
            if current is not None and current.host != signer_host:
                raise EnvelopeError(
                    f"tombstone for {gid} (on {current.host}) signed by {signer_host}",
                    reason=SIGNER_MISMATCH,
                    raw=raw,
                )
            gone = self._entries.pop(gid, None) or self._gone.get(gid)
            if gone is not None:
                self._retracted[gid] = gone
                if len(self._retracted) > MAX_RETRACTED:
                    self._retracted.pop(next(iter(self._retracted)))

    def incarnation_of(self, host: str) -> int:
        """The highest incarnation of ``host`` this view has read (0: none): a gateway starting
        takes one above it, so a wiped store or a twin on another store cannot go backwards."""
        with self._lock:
            seen = [*self._entries.values(), *self._gone.values(), *self._retracted.values()]
        return max((e.incarnation for e in seen if e.host == host), default=0)

    # -- freshness (set by the follower) ---------------------------------------------------------
    def mark_current(self, horizon_ms: int) -> None:
        """Every roster record produced before ``horizon_ms`` has been applied."""
        with self._lock:
            f = self._freshness
            if f.horizon_ms is None or horizon_ms > f.horizon_ms:
                self._freshness = Freshness(horizon_ms=horizon_ms, stale=f.stale, why=f.why)

    def mark_stale(self, stale: bool, why: str = "") -> None:
        with self._lock:
            f = self._freshness
            self._freshness = Freshness(horizon_ms=f.horizon_ms, stale=stale, why=why)

    def freshness(self) -> Freshness:
        return self._freshness

    def horizon_ms(self) -> int:
        """What liveness is judged against: the follower's horizon, else the clock."""
        h = self._freshness.horizon_ms
        return self._clock() if h is None else h

    def is_live(self, entry: PresenceEntry) -> bool:
        return entry.live(self.horizon_ms())

    # -- reading (PresenceView) -------------------------------------------------------------------
    def host_of(self, gid: str) -> str | None:
        """The last signed binding of ``gid`` (live or not); None when never announced or
        retracted by a tombstone. Verification step 2 asks this."""
        entry = self._entries.get(gid)
        return None if entry is None else entry.host

    def current_agreement(self, host: str) -> PeerKey | None:
        """``host``'s newest published agreement key (a sender seals with it); PeerKeys."""
        return self._agreement_current.get(host)

    def agreement(self, key_id: str) -> PeerKey | None:
        """A published agreement key by id, current or previous (a receiver opens with it)."""
        return self._agreement_by_id.get(key_id)

    def live_host(self, gid: str) -> str | None:
        """The host of ``gid`` while it is live (routing)."""
        entry = self._entries.get(gid)
        if entry is None or not self.is_live(entry):
            return None
        return entry.host

    def get(self, gid: str) -> PresenceEntry | None:
        return self._entries.get(gid)

    def takes(self, host: str, kind: str) -> bool:
        """True when ``host``'s gateway entry, as last read, says its host reads ``kind``
        (``PresenceEntry.takes``): a sender sends that kind to it, else the older form."""
        entry = self._entries.get(gateway_gid(host))
        return entry is not None and kind in entry.takes

    def departed(self, gid: str) -> PresenceEntry | None:
        """The departure record of ``gid`` (its ``gone`` says why) while it is bound nowhere;
        None when it is bound, never announced, or left without one (a gateway's tombstones)."""
        return self._gone.get(gid)

    def departures(self) -> list[PresenceEntry]:
        """Every remembered departure, by gid (what the store's roster mirror keeps)."""
        with self._lock:
            items = list(self._gone.values())
        return sorted(items, key=lambda e: e.gid)

    def entries(self, *, include_stale: bool = False) -> list[PresenceEntry]:
        """Live entries; ``include_stale=True`` adds the lapsed ones (every known binding)."""
        horizon = self.horizon_ms()
        with self._lock:
            items = list(self._entries.values())
        return sorted(
            (e for e in items if include_stale or e.live(horizon)), key=lambda e: (e.host, e.gid)
        )

    def hosts(self) -> dict[str, PresenceEntry | None]:
        """Live hosts -> their live gateway entry (None when only agents are visible)."""
        out: dict[str, PresenceEntry | None] = {}
        for e in self.entries():
            if e.role is Role.GATEWAY:
                out[e.host] = e
            else:
                out.setdefault(e.host, None)
        return dict(sorted(out.items()))

    def members(self, group: str) -> list[PresenceEntry]:
        return [e for e in self.entries() if group in e.groups]
