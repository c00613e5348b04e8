"""Members of the fleet's worker-pool consumer groups: one DescribeConsumerGroups for them all.

``fleet top`` shows who is in each pool beside its lag; ``fleet pool status`` describes one
pool in depth. Member names are the static ``group.instance.id`` where set, else the client id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException

from pipeline.errors import BrokerError


def member_name(member: Any) -> str:
    return str(member.group_instance_id or member.client_id or member.member_id)


def group_members(
    admin: Any, groups: Sequence[str], *, timeout_s: float = 10.0
) -> dict[str, list[str]]:
    """Member names per group, sorted; a group that cannot be described is left out (raises
    only when every group failed)."""
    if not groups:
        return {}
    futures = admin.describe_consumer_groups(list(groups), request_timeout=timeout_s)
    out: dict[str, list[str]] = {}
    errors: list[str] = []
    for group, fut in futures.items():
        try:
            desc = fut.result(timeout=timeout_s + 5)
        except (KafkaException, TimeoutError) as exc:
            errors.append(f"{group}: {exc}")
            continue
        out[group] = sorted(member_name(m) for m in desc.members)
    if errors and not out:
        raise BrokerError(f"describing pool groups failed: {errors[0]}")
    return out
