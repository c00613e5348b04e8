"""Least-privilege ACLs for one gateway's login (``fleet acls plan|apply``, docs/security.md).

A gateway host H (principal ``User:H``) needs, and gets, exactly::

    read      its own inbox and control topic, the roster (presence), its group gw.H
    write     every inbox and control topic (prefix: it sends to the others), the roster, the DLQ
    describe  the topics it reads or writes (metadata) and their configs (the topology check)
    cluster   IDEMPOTENT_WRITE (the relay's idempotent producer; implied by WRITE on Kafka >= 2.8,
              granted for older brokers)

It gets no READ on another host's inbox or control topic and no access to another host's group,
so ``User:X`` cannot read ``inbox.Y`` or join ``gw.Y`` (``NOT_AUTHORIZED``). The roster readers
use throw-away groups ``<prefix>roster-reader.*`` (assign only, never committed): a prefixed READ.
Topic creation is the operator's (``fleet topics apply`` as ``admin``): a gateway creates nothing.
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

from .errors import as_fleet_error
from .topics import TopicNames, check_name


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


def gateway_grants(host: str, topics: TopicNames = TopicNames()) -> tuple[Grant, ...]:
    """Everything gateway ``host`` needs and nothing more (see the module docstring)."""
    check_name(host, what="host id")
    principal = f"User:{host}"
    lit, pre = Pattern.LITERAL, Pattern.PREFIXED
    out: list[Grant] = []

    def add(resource: Resource, name: str, pattern: Pattern, *ops: Operation) -> None:
        out.extend(
            Grant(principal=principal, resource=resource, name=name, pattern=pattern, operation=op)
            for op in ops
        )

    read = (Operation.READ, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS)
    add(Resource.TOPIC, topics.inbox(host), lit, *read)
    add(Resource.TOPIC, topics.control(host), lit, *read)
    add(Resource.TOPIC, topics.roster, lit, *read, Operation.WRITE)
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
    add(Resource.CLUSTER, CLUSTER_NAME, lit, Operation.IDEMPOTENT_WRITE)
    return tuple(out)


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
