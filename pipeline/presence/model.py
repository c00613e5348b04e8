"""Presence entries and their signed records on the compacted roster (R-PRES-2).

Key = gid (or ``<host>._gateway`` for the host entry, which carries the spawn profiles so an
agentless host is still visible as a spawn target). Value = Avro ``presence`` inside a signed
envelope of kind PRESENCE with ``from`` = ``to`` = the gid. A tombstone (null value) is signed
too: its headers cover an empty body, so only the owning host can retract an entry.

Order (docs/presence.md "Order: incarnation, then ts"): the records one host wrote for a gid
compare by ``(incarnation, ts_ms)``. The incarnation is the publishing gateway's start count,
taken from its store at start and signed inside the body (label ``fleet.incarnation``), so a
gateway restarted
with its clock behind still outranks everything its previous run wrote; records of older
gateways (v1-v3) read as incarnation 0. Across hosts (a gid moving) the incarnations are
unrelated counters and ``ts_ms`` alone decides. Liveness (``ts + ttl``) is judged by time.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline import schemas
from pipeline.envelope import SCHEMA_INVALID, Envelope, Kind, Signer, encode
from pipeline.envelope.reasons import GATEWAY_SUFFIX
from pipeline.errors import EnvelopeError
from pipeline.kafka.topics import TopicNames

from . import roles

SCHEMA = "presence"
# the incarnation travels as a reserved label (labels exist since presence v2, inside the signed
# body): a gateway that predates it reads the record and ignores the label, and its own records,
# without the label, read as incarnation 0 -- a mixed fleet keeps working during an upgrade
INCARNATION_LABEL = "fleet.incarnation"
# an *away* record (docs/presence.md "Away"): a gateway stopped with SIGTERM re-announces its
# entities with ``ttl`` = the grace and this label = when it left (wall ms). A label, not a schema
# field: a reader that predates it sees a live record that lapses at ``ts + grace``, as a new
# reader does -- neither takes it for a tombstone
AWAY_LABEL = "fleet.away_since"
# the kinds a gateway entry's host reads beyond those every release reads, comma-separated
# (docs/presence.md "What a host takes"): a peer sends such a kind only to a host that says it
# takes it. A label for the same reason as the two above: every reader reads the record
TAKES_LABEL = "fleet.takes"
# what this release's gateway takes: receipts batched into one record (docs/envelope.md)
GATEWAY_TAKES: frozenset[str] = frozenset({Kind.RECEIPTS.value})
_RESERVED = (INCARNATION_LABEL, AWAY_LABEL, TAKES_LABEL)
_DECIMAL = re.compile(r"[0-9]{1,18}")
# defined in .roles (a config reads them without loading the envelope); still importable here
Role = roles.Role
Delivery = roles.Delivery


class Gone(enum.StrEnum):
    """Why a worker left the fleet, carried by its last presence record (its *departure*, just
    before its tombstone) so a sender can be told ``RECIPIENT_GONE`` rather than
    ``UNKNOWN_RECIPIENT``. A heartbeat carries none."""

    STOPPED = "stopped"  # a STOP asked for it
    DIED = "died"  # its process (or its profile's check) said it was gone


def _count(label: str, raw: str | None, gid: object) -> int | None:
    if raw is None:
        return None  # written by a gateway older than the label, or not away
    if not _DECIMAL.fullmatch(raw):
        raise EnvelopeError(
            f"presence for {gid}: label {label}={raw[:40]!r} is not a count",
            reason=SCHEMA_INVALID,
        )
    return int(raw)


def gateway_gid(host: str) -> str:
    return f"{host}{GATEWAY_SUFFIX}"


@dataclass(frozen=True, kw_only=True, slots=True)
class SpawnProfile:
    name: str
    description: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class PresenceEntry:
    """One live claim "gid lives on host", valid until ``ts_ms + ttl_ms``."""

    gid: str
    host: str
    role: Role
    delivery: Delivery
    ts_ms: int
    ttl_ms: int
    groups: tuple[str, ...] = ()
    profiles: tuple[SpawnProfile, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    gone: Gone | None = None  # set only on a departure record
    # the gateway entry's X25519 public key, when its host takes pairwise-MAC'd records
    agreement_key: bytes | None = None
    incarnation: int = 0  # the publishing gateway's start count (0: an older gateway wrote it)
    # set on an *away* record: when its gateway stopped (wall ms); ``ttl_ms`` is then the grace
    away_since_ms: int | None = None
    # a gateway entry: the kinds its host reads beyond every release's (``TAKES_LABEL``)
    takes: frozenset[str] = frozenset()

    @property
    def is_gateway(self) -> bool:
        return self.role is Role.GATEWAY

    def live(self, now_ms: int) -> bool:
        return now_ms <= self.ts_ms + self.ttl_ms

    def older_than(self, other: PresenceEntry) -> bool:
        """True when ``other`` supersedes this record: by ``(incarnation, ts_ms)`` when one
        host wrote both, by ``ts_ms`` alone across hosts (their incarnations are unrelated)."""
        if self.host == other.host:
            return (self.incarnation, self.ts_ms) < (other.incarnation, other.ts_ms)
        return self.ts_ms < other.ts_ms

    def _labels(self) -> dict[str, str]:
        labels = {k: v for k, v in self.labels.items() if k not in _RESERVED}
        if self.incarnation:
            labels[INCARNATION_LABEL] = str(self.incarnation)
        if self.away_since_ms is not None:
            labels[AWAY_LABEL] = str(self.away_since_ms)
        if self.takes:
            labels[TAKES_LABEL] = ",".join(sorted(self.takes))
        return labels

    def to_record(self) -> dict[str, Any]:
        return {
            "gid": self.gid,
            "host": self.host,
            "role": self.role.value,
            "delivery": self.delivery.value,
            "groups": list(self.groups),
            "ts_ms": self.ts_ms,
            "ttl_ms": self.ttl_ms,
            "profiles": [{"name": p.name, "description": p.description} for p in self.profiles],
            "labels": self._labels(),
            "gone": None if self.gone is None else self.gone.value,
            "agreement_key": self.agreement_key,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> PresenceEntry:
        labels = dict(rec.get("labels") or {})
        gid = rec.get("gid")
        incarnation = _count(INCARNATION_LABEL, labels.pop(INCARNATION_LABEL, None), gid) or 0
        away_since = _count(AWAY_LABEL, labels.pop(AWAY_LABEL, None), gid)
        takes = labels.pop(TAKES_LABEL, "")
        return cls(
            gid=rec["gid"],
            host=rec["host"],
            role=Role(rec["role"]),
            delivery=Delivery(rec["delivery"]),
            ts_ms=int(rec["ts_ms"]),
            ttl_ms=int(rec["ttl_ms"]),
            groups=tuple(rec.get("groups") or ()),
            profiles=tuple(
                SpawnProfile(name=p["name"], description=p.get("description", ""))
                for p in rec.get("profiles") or ()
            ),
            labels=labels,
            gone=None if rec.get("gone") is None else Gone(rec["gone"]),
            agreement_key=rec.get("agreement_key"),
            incarnation=incarnation,
            away_since_ms=away_since,
            takes=frozenset(filter(None, takes.split(","))),
        )

    def as_json(self, now_ms: int) -> dict[str, Any]:
        return {**self.to_record(), "live": self.live(now_ms), "away_since_ms": self.away_since_ms}


def presence_record(
    entry: PresenceEntry, *, signer: Signer, topics: TopicNames = TopicNames()
) -> tuple[bytes, list[tuple[str, bytes]], bytes]:
    """(key, headers, value) of a signed heartbeat; the envelope lives as long as the entry."""
    record = entry.to_record()
    if entry.agreement_key is None:  # v3 (the incarnation is a label): every reader reads it
        del record["agreement_key"]
        body = schemas.encode(SCHEMA, record, version=3)
    else:  # v4 only on a pairwise-MAC host: its peers must have the mode's code anyway
        body = schemas.encode(SCHEMA, record)
    env = Envelope.new(
        kind=Kind.PRESENCE,
        sender=entry.gid,
        to=entry.gid,
        body=body,
        ttl_s=entry.ttl_ms / 1000,
        now_ms=entry.ts_ms,
    )
    return encode(env, topic=topics.roster, signer=signer)


def tombstone_record(
    gid: str, *, signer: Signer, ts_ms: int, topics: TopicNames = TopicNames()
) -> tuple[bytes, list[tuple[str, bytes]], None]:
    """(key, headers, None): a compaction tombstone whose headers sign an empty body."""
    env = Envelope.new(kind=Kind.PRESENCE, sender=gid, to=gid, body=b"", ttl_s=0, now_ms=ts_ms)
    key, headers, _ = encode(env, topic=topics.roster, signer=signer)
    return key, headers, None
