"""Every table's purge rule, assembled: the composition root hands them to each purger.

Each package declares the rules of the tables it owns (its ``purge_rules`` module); the purger
(:mod:`pipeline.retention.purger`) knows none of them, so the retention layer sits below every
feature. :data:`RULES` is in :class:`~pipeline.retention.rules.StoreTable` order.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from pipeline.control import purge_rules as control
from pipeline.effects import purge_rules as effects
from pipeline.failures import purge_rules as failures
from pipeline.host import purge_rules as host
from pipeline.outbox import purge_rules as outbox
from pipeline.pool import purge_rules as pool
from pipeline.retention.metrics import RetentionMetrics
from pipeline.retention.policy import RetentionConfig
from pipeline.retention.purger import Purger
from pipeline.retention.rules import PurgeRule, StoreTable, in_purge_order
from pipeline.runs import purge_rules as runs
from pipeline.runtime import purge_rules as runtime

RULES: tuple[PurgeRule, ...] = in_purge_order(
    outbox.RULES
    + host.RULES
    + failures.RULES
    + runtime.RULES
    + effects.RULES
    + control.RULES
    + runs.RULES
    + pool.RULES
)


def rules_for(*tables: StoreTable) -> tuple[PurgeRule, ...]:
    """The rules of ``tables`` in :data:`RULES` order (a process purges only the tables it
    writes: a relay beside a gateway must not apply its own retention to the gateway's rows)."""
    wanted = set(tables)
    return tuple(r for r in RULES if r.name in wanted)


def purger_for(
    engine: Engine,
    policy: RetentionConfig,
    tables: Iterable[StoreTable],
    *,
    registry: CollectorRegistry | None = None,
) -> Purger:
    """A process's purger: only ``tables`` (the ones it writes), counted in ``registry``."""
    metrics = RetentionMetrics(registry) if registry is not None else None
    return Purger(engine=engine, policy=policy, metrics=metrics, rules=rules_for(*tables))
