"""Declare the fleet's topics idempotently at boot (R-TOP-2).

Plan first, then act: every desired topic is compared with the cluster. A partition-count or
replication-factor difference is refused (:class:`~pipeline.errors.TopologyError`, reason
``TOPOLOGY_MISMATCH``) before anything is changed -- growing partitions would move keys to other
partitions and break per-recipient order. ``replication=None`` (what a gateway and a pool member
declare) means "the cluster's": a missing topic is created with the broker's
``default.replication.factor`` and an existing topic keeps its factor, so a gateway runs on a
replicated cluster (RF 3, min ISR 2) exactly as on one broker. Missing topics are created; config values that differ
are set with an incremental alter (only the keys we declare; others are left alone). Applying
the same spec twice changes nothing the second time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, untyped
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from pipeline.errors import BrokerError, TopologyError

from .clients import ClientFactory, new_admin
from .refusals import security_error
from .settings import admin_config
from .topics import TopicNames

DAY_MS = 86_400_000


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int | None  # None: the broker's default.replication.factor; any existing RF
    config: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class TopologySpec:
    """What the fleet needs. Partition counts are fixed at creation (see module docstring)."""

    hosts: tuple[str, ...]
    pools: tuple[str, ...] = ()
    topics: TopicNames = TopicNames()
    inbox_partitions: int = 6
    control_partitions: int = 1
    roster_partitions: int = 1
    dlq_partitions: int = 1
    jobs_partitions: int = 1  # a job's claims share one partition (keyed by job id)
    jobs_retention_ms: int = 7 * DAY_MS  # a job's caps count what this window still holds
    pool_partitions: int = 6
    # None: the cluster decides (default.replication.factor) and an existing RF is accepted
    replication: int | None = 1
    min_insync_replicas: int | None = None
    inbox_retention_ms: int = 7 * DAY_MS
    dlq_retention_ms: int = 14 * DAY_MS
    dlq_retention_bytes: int = 1 << 30
    roster_tombstone_retention_ms: int = DAY_MS
    # a pool member reads no roster: its login (``fleet acls plan --role pool``) cannot even
    # describe it, so its check leaves the roster out instead of trying to create it
    roster: bool = True

    def desired(self) -> list[TopicSpec]:
        t = self.topics
        base: dict[str, str] = {}
        if self.min_insync_replicas is not None:
            base["min.insync.replicas"] = str(self.min_insync_replicas)
        stream = {**base, "cleanup.policy": "delete", "retention.ms": str(self.inbox_retention_ms)}
        roster = [
            TopicSpec(
                name=t.roster,
                partitions=self.roster_partitions,
                replication=self.replication,
                config={
                    **base,
                    "cleanup.policy": "compact",
                    "delete.retention.ms": str(self.roster_tombstone_retention_ms),
                    "segment.ms": str(3_600_000),  # roll hourly so compaction can run
                },
            ),
        ]
        # the job ledger: never compacted (a job's claims share a key, and each one counts)
        jobs = TopicSpec(
            name=t.jobs,
            partitions=self.jobs_partitions,
            replication=self.replication,
            config={
                **base,
                "cleanup.policy": "delete",
                "retention.ms": str(self.jobs_retention_ms),
            },
        )
        out = [*roster, jobs] if self.roster else []  # neither is a pool member's business
        out += [
            TopicSpec(
                name=t.dlq,
                partitions=self.dlq_partitions,
                replication=self.replication,
                config={
                    **base,
                    "cleanup.policy": "delete",
                    "retention.ms": str(self.dlq_retention_ms),
                    "retention.bytes": str(self.dlq_retention_bytes),  # per partition
                },
            ),
        ]
        for host in sorted(set(self.hosts)):
            out.append(
                TopicSpec(
                    name=t.inbox(host),
                    partitions=self.inbox_partitions,
                    replication=self.replication,
                    config=stream,
                )
            )
            out.append(
                TopicSpec(
                    name=t.control(host),
                    partitions=self.control_partitions,
                    replication=self.replication,
                    config=stream,
                )
            )
        for pool in sorted(set(self.pools)):
            out.append(
                TopicSpec(
                    name=t.pool(pool),
                    partitions=self.pool_partitions,
                    replication=self.replication,
                    config=stream,
                )
            )
        return out


@dataclass(kw_only=True)
class TopologyReport:
    created: list[str] = field(default_factory=list)
    altered: dict[str, dict[str, tuple[str | None, str]]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.created or self.altered)

    def as_json(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "altered": {
                t: {k: {"from": a, "to": b} for k, (a, b) in d.items()}
                for t, d in self.altered.items()
            },
            "unchanged": self.unchanged,
            "changed": self.changed,
            "dry_run": self.dry_run,
        }


def _result(future: Any, timeout_s: float, what: str) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except Exception as exc:  # KafkaException or a timeout: both end in BrokerError
        raise BrokerError(f"{what}: {exc}") from exc


def _plan(admin: Any, desired: list[TopicSpec], timeout_s: float) -> tuple[Any, list[TopicSpec]]:
    """The cluster's topics and the declared ones that exist; a partition or replication
    mismatch among those refuses here, before anything changes."""
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # KafkaException: broker unreachable
        raise BrokerError(f"cannot list topics: {exc}") from exc
    existing = [d for d in desired if d.name in meta.topics]
    mismatches = []
    for d in existing:
        parts = meta.topics[d.name].partitions
        have_rf = len(parts[min(parts)].replicas) if parts else 0
        if len(parts) != d.partitions:
            mismatches.append(f"{d.name}: partitions {len(parts)} != declared {d.partitions}")
        if d.replication is not None and have_rf != d.replication:
            mismatches.append(f"{d.name}: replication {have_rf} != declared {d.replication}")
    if mismatches:
        raise TopologyError(
            "topology mismatch, nothing changed (partition counts are never altered: it would "
            "break per-key order):\n  " + "\n  ".join(mismatches),
            context={"mismatches": mismatches},
        )
    return meta, existing


def _new_topic(d: TopicSpec) -> NewTopic:
    return NewTopic(
        d.name,
        num_partitions=d.partitions,
        replication_factor=-1 if d.replication is None else d.replication,
        config=dict(d.config),
    )


def _exist_already(admin: Any, missing: list[TopicSpec], timeout_s: float) -> bool:
    """True when the controller says one of ``missing`` exists (a validate-only create:
    nothing is created). Any other answer is left to the real create to report."""
    futures = admin.create_topics(
        [_new_topic(d) for d in missing], operation_timeout=timeout_s, validate_only=True
    )
    for fut in futures.values():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return True
        except Exception:  # noqa: BLE001 - a timeout: the real create reports it
            pass
    return False


def _check_raced(admin: Any, specs: list[TopicSpec], timeout_s: float) -> None:
    """A topic a peer created while we tried: it must still match what we declare."""
    meta = admin.list_topics(timeout=timeout_s)
    bad = [
        f"{d.name}: partitions {len(meta.topics[d.name].partitions)} != declared {d.partitions}"
        for d in specs
        if d.name in meta.topics and len(meta.topics[d.name].partitions) != d.partitions
    ]
    if bad:
        raise TopologyError(
            "topology mismatch after a concurrent create:\n  " + "\n  ".join(bad),
            context={"mismatches": bad},
        )


def apply_topology(
    bootstrap: str,
    spec: TopologySpec,
    *,
    dry_run: bool = False,
    timeout_s: float = 30.0,
    admin_factory: ClientFactory = new_admin,
) -> TopologyReport:
    """Create what is missing, set differing configs, refuse partition/replication mismatches."""
    admin = admin_factory(admin_config(bootstrap))
    desired = spec.desired()
    deadline = time.monotonic() + timeout_s
    while True:
        meta, existing = _plan(admin, desired, timeout_s)
        missing = [d for d in desired if d.name not in meta.topics]
        # a broker's metadata can lag its controller by a moment (a topic created just now is
        # not listed yet): ask the controller, creating nothing, and plan again on what it
        # says exists, so a mismatch refuses before anything is created (CI 2026-12-04)
        if dry_run or not missing or not _exist_already(admin, missing, timeout_s):
            break
        if time.monotonic() >= deadline:
            break  # the create below meets them as raced, and checks them then
        time.sleep(0.1)
    report = TopologyReport(dry_run=dry_run)
    report.altered = _config_diffs(admin, existing, timeout_s)
    report.unchanged = [d.name for d in existing if d.name not in report.altered]
    report.created = [d.name for d in desired if d.name not in meta.topics]
    if dry_run:
        return report
    if report.created:
        new = [_new_topic(d) for d in desired if d.name in report.created]
        raced: list[str] = []
        for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
            try:
                fut.result(timeout=timeout_s)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not (
                    isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS
                ):
                    refused = (
                        security_error(err, "create", resource=name)
                        if isinstance(err, KafkaError)
                        else None
                    )
                    raise refused or BrokerError(f"create {name}: {exc}") from exc
                raced.append(name)  # another gateway booting at the same time created it
            except Exception as exc:  # a timeout: the create may or may not have happened
                raise BrokerError(f"create {name}: {exc}") from exc
        if raced:
            _check_raced(admin, [d for d in desired if d.name in raced], timeout_s)
    if report.altered:
        resources = [
            ConfigResource(
                ResourceType.TOPIC,
                name,
                incremental_configs=[
                    ConfigEntry(k, new, incremental_operation=AlterConfigOpType.SET)
                    for k, (_, new) in diff.items()
                ],
            )
            for name, diff in report.altered.items()
        ]
        for res, fut in admin.incremental_alter_configs(resources).items():
            _result(fut, timeout_s, f"alter {res.name}")
    return report


def _config_diffs(
    admin: AdminClient, existing: list[TopicSpec], timeout_s: float
) -> dict[str, dict[str, tuple[str | None, str]]]:
    if not existing:
        return {}
    by_name = {d.name: d for d in existing}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in by_name])
    diffs: dict[str, dict[str, tuple[str | None, str]]] = {}
    for res, fut in futures.items():
        have = _result(fut, timeout_s, f"describe {res.name}")
        want = by_name[res.name].config
        diff = {
            k: (have[k].value if k in have else None, v)
            for k, v in want.items()
            if k not in have or have[k].value != v
        }
        if diff:
            diffs[res.name] = diff
    return diffs


def ensure_pool_topic(
    bootstrap: str,
    topics: TopicNames,
    pool: str,
    *,
    partitions: int,
    timeout_s: float = 30.0,
    admin_factory: ClientFactory = new_admin,
) -> int:
    """A pool member's topology: the pool topic (created with ``partitions`` when missing; an
    existing one keeps its count -- the operator sized it) and the DLQ, not the roster (a
    member reads none). Returns the count."""
    admin = admin_factory(admin_config(bootstrap))
    try:
        meta = admin.list_topics(topics.pool(pool), timeout=timeout_s)
    except Exception as exc:  # KafkaException: broker unreachable
        raise BrokerError(f"cannot list topics: {exc}") from exc
    have = meta.topics.get(topics.pool(pool))
    if have is not None and have.error is None and have.partitions:
        partitions = len(have.partitions)
    apply_topology(
        bootstrap,
        TopologySpec(
            hosts=(),
            pools=(pool,),
            topics=topics,
            pool_partitions=partitions,
            replication=None,
            roster=False,
        ),
        timeout_s=timeout_s,
        admin_factory=admin_factory,
    )
    return partitions
