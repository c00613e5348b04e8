"""Least-privilege ACLs per login and role (``fleet acls plan|apply --role``, docs/security.md).

Five roles, each a closed set (:class:`Role`); the login NAME is the principal ``User:NAME``
unless a ``principal`` is given: a certificate's mapped DN or an OAuth token's ``sub``
(:mod:`pipeline.kafka.principals`). The host id (which topics) and the principal (who) are then
apart: gateway ``a`` may log in as ``User:gateway-a`` or ``User:7f3c...``.

A gateway host H (principal ``User:H``) needs, and gets, exactly::

    read      its own inbox and control topic, the roster (presence), the job ledger (jobs),
              its group gw.H
    write     every inbox and control topic (prefix: it sends to the others), the roster, the
              job ledger (admission claims and releases), the DLQ
    describe  the topics it reads or writes (metadata) and their configs (the topology check)
    cluster   IDEMPOTENT_WRITE (the relay's idempotent producer; implied by WRITE on Kafka >= 2.8,
              granted for older brokers)

It gets no READ on another host's inbox or control topic and no access to another host's group,
so ``User:X`` cannot read ``inbox.Y`` or join ``gw.Y`` (``NOT_AUTHORIZED``). The roster readers
and the job ledger's reader use throw-away groups ``<prefix>roster-reader.*`` and
``<prefix>jobs-reader.*`` (assign only, never committed): a prefixed READ.
Topic creation is the operator's (``fleet topics apply`` as ``admin``): a gateway creates nothing.

The narrower roles (:func:`role_grants`)::

    reporter   the FAILED reporter (``fleet dlq report``, with ``--relay``): read the DLQ and
               its group <prefix>dlq-reporter; write the inboxes it answers into (prefix);
               idempotent write. No roster, no control topic, no other group.
    exporter   ``fleet exporter`` / ``fleet lag``: DESCRIBE the fleet's topics and groups
               (prefix), DESCRIBE_CONFIGS of the topics (retention risk). No READ anywhere: it
               reads offsets, never a record (so lag in seconds is the sampler's lower bound).
    dlq-owner  ``fleet dlq ls|show|replay``: read and describe the DLQ with the scan groups
               fleet-dlq-scan.*; replay writes a dead letter back where it came from (inbox,
               control or pool topic: prefixes); idempotent write. No READ on any inbox.
    pool       a member of pool P (``fleet pool run --pool P``): read topic pool.P in its group
               pool.P, describe both and the topic's configs (the topology check); write the
               DLQ (a poison record is dead-lettered); idempotent write. No other pool, no
               inbox, and it creates no topic (the operator's ``fleet topics apply --pool P``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, untyped
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from pipeline.errors import ConfigError
from pipeline.reasons import Config

from .errors import as_fleet_error
from .principals import check_principal
from .topics import DLQ_SCAN_GROUP_PREFIX, TopicNames, check_name


class Role(enum.StrEnum):
    GATEWAY = "gateway"
    REPORTER = "reporter"
    EXPORTER = "exporter"
    DLQ_OWNER = "dlq-owner"
    POOL = "pool"


class Resource(enum.StrEnum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"


class Pattern(enum.StrEnum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Operation(enum.StrEnum):
    READ = "READ"
    WRITE = "WRITE"
    DESCRIBE = "DESCRIBE"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"


@dataclass(frozen=True, kw_only=True, order=True)
class Grant:
    """One ALLOW ACL: ``principal`` may ``operation`` on ``resource`` ``name`` (``pattern``)."""

    principal: str
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation

    def line(self) -> str:
        return (
            f"ALLOW {self.principal} {self.operation.value} {self.resource.value} "
            f"{self.name} ({self.pattern.value.lower()})"
        )


CLUSTER_NAME = "kafka-cluster"


class _Plan:
    """Collects one principal's grants."""

    def __init__(self, login: str, *, what: str, principal: str | None = None) -> None:
        check_name(login, what=what)
        self.principal = check_principal(principal) if principal else f"User:{login}"
        self.grants: list[Grant] = []

    def add(self, resource: Resource, name: str, pattern: Pattern, *ops: Operation) -> None:
        self.grants.extend(
            Grant(
                principal=self.principal,
                resource=resource,
                name=name,
                pattern=pattern,
                operation=op,
            )
            for op in ops
        )


def gateway_grants(
    host: str, topics: TopicNames = TopicNames(), *, principal: str | None = None
) -> tuple[Grant, ...]:
    """Everything gateway ``host`` needs and nothing more (see the module docstring)."""
    plan = _Plan(host, what="host id", principal=principal)
    add, lit, pre = plan.add, Pattern.LITERAL, Pattern.PREFIXED

    read = (Operation.READ, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS)
    add(Resource.TOPIC, topics.inbox(host), lit, *read)
    add(Resource.TOPIC, topics.control(host), lit, *read)
    add(Resource.TOPIC, topics.roster, lit, *read, Operation.WRITE)
    add(Resource.TOPIC, topics.jobs, lit, *read, Operation.WRITE)  # the job ledger
    add(
        Resource.TOPIC,
        topics.dlq,
        lit,
        Operation.WRITE,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
    )
    add(Resource.TOPIC, f"{topics.prefix}inbox.", pre, Operation.WRITE, Operation.DESCRIBE)
    add(Resource.TOPIC, f"{topics.prefix}control.", pre, Operation.WRITE, Operation.DESCRIBE)
    add(Resource.GROUP, topics.gateway_group(host), lit, Operation.READ, Operation.DESCRIBE)
    add(Resource.GROUP, f"{topics.prefix}roster-reader.", pre, Operation.READ)
    add(Resource.GROUP, f"{topics.prefix}jobs-reader.", pre, Operation.READ)
    add(Resource.CLUSTER, CLUSTER_NAME, lit, Operation.IDEMPOTENT_WRITE)
    return tuple(plan.grants)


def reporter_grants(
    login: str, topics: TopicNames = TopicNames(), *, principal: str | None = None
) -> tuple[Grant, ...]:
    """The FAILED reporter: reads the DLQ in its group, writes FAILEDs to the senders' inboxes."""
    plan = _Plan(login, what="login", principal=principal)
    add, lit, pre = plan.add, Pattern.LITERAL, Pattern.PREFIXED
    add(Resource.TOPIC, topics.dlq, lit, Operation.READ, Operation.DESCRIBE)
    add(Resource.GROUP, f"{topics.prefix}dlq-reporter", lit, Operation.READ, Operation.DESCRIBE)
    add(Resource.TOPIC, f"{topics.prefix}inbox.", pre, Operation.WRITE, Operation.DESCRIBE)
    add(Resource.CLUSTER, CLUSTER_NAME, lit, Operation.IDEMPOTENT_WRITE)
    return tuple(plan.grants)


def exporter_grants(
    login: str, topics: TopicNames = TopicNames(), *, principal: str | None = None
) -> tuple[Grant, ...]:
    """The exporter: offsets and configs of the fleet's topics and groups; never a record."""
    plan = _Plan(login, what="login", principal=principal)
    pre = Pattern.PREFIXED
    plan.add(Resource.TOPIC, topics.prefix, pre, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS)
    plan.add(Resource.GROUP, topics.prefix, pre, Operation.DESCRIBE)
    return tuple(plan.grants)


def dlq_owner_grants(
    login: str, topics: TopicNames = TopicNames(), *, principal: str | None = None
) -> tuple[Grant, ...]:
    """The DLQ's owner: reads dead letters, replays them to where they came from."""
    plan = _Plan(login, what="login", principal=principal)
    add, lit, pre = plan.add, Pattern.LITERAL, Pattern.PREFIXED
    add(Resource.TOPIC, topics.dlq, lit, Operation.READ, Operation.DESCRIBE)
    add(Resource.GROUP, DLQ_SCAN_GROUP_PREFIX, pre, Operation.READ, Operation.DESCRIBE)
    for kind in ("inbox.", "control.", "pool."):
        add(Resource.TOPIC, f"{topics.prefix}{kind}", pre, Operation.WRITE, Operation.DESCRIBE)
    add(Resource.CLUSTER, CLUSTER_NAME, lit, Operation.IDEMPOTENT_WRITE)
    return tuple(plan.grants)


def pool_grants(
    login: str, topics: TopicNames, pool: str, *, principal: str | None = None
) -> tuple[Grant, ...]:
    """A member of ``pool``: consumes its topic in its group, dead-letters poison records."""
    plan = _Plan(login, what="login", principal=principal)
    add, lit = plan.add, Pattern.LITERAL
    described = (Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS)
    add(Resource.TOPIC, topics.pool(pool), lit, Operation.READ, *described)
    add(Resource.GROUP, topics.pool_group(pool), lit, Operation.READ, Operation.DESCRIBE)
    add(Resource.TOPIC, topics.dlq, lit, Operation.WRITE, *described)
    add(Resource.CLUSTER, CLUSTER_NAME, lit, Operation.IDEMPOTENT_WRITE)
    return tuple(plan.grants)


_ROLES = {
    Role.GATEWAY: gateway_grants,
    Role.REPORTER: reporter_grants,
    Role.EXPORTER: exporter_grants,
    Role.DLQ_OWNER: dlq_owner_grants,
}


def role_grants(
    role: Role,
    login: str,
    topics: TopicNames = TopicNames(),
    *,
    pool: str | None = None,
    principal: str | None = None,
) -> tuple[Grant, ...]:
    """The grants of ``role`` for principal ``User:<login>`` (a gateway's login is its host id),
    or for ``principal`` when given; the ``pool`` role needs the pool's name, and only it takes
    one."""
    if (role is Role.POOL) != (pool is not None):
        raise ConfigError(
            "--pool NAME goes with --role pool, and only with it",
            reason=Config.CONFIG_INVALID,
            context={"role": role.value},
        )
    if pool is not None:
        return pool_grants(login, topics, pool, principal=principal)
    return _ROLES[role](login, topics, principal=principal)


def binding(grant: Grant) -> AclBinding:
    """``grant`` as confluent-kafka's ALLOW binding (any host)."""
    # confluent-kafka names Kafka's CLUSTER resource type BROKER
    kind = "BROKER" if grant.resource is Resource.CLUSTER else grant.resource.value
    return AclBinding(
        ResourceType[kind],
        grant.name,
        ResourcePatternType[grant.pattern.value],
        grant.principal,
        "*",
        AclOperation[grant.operation.value],
        AclPermissionType.ALLOW,
    )


def apply_grants(admin: Any, grants: tuple[Grant, ...], *, timeout_s: float = 30.0) -> int:
    """Create ``grants`` with ``admin`` (an admin client logged in as a super user); creating an
    ACL that exists is a no-op on the broker, so applying twice is safe. Returns the count."""
    futures = admin.create_acls([binding(g) for g in grants], request_timeout=timeout_s)
    for acl, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise as_fleet_error(exc, f"create ACL {acl}") from exc
    return len(grants)
