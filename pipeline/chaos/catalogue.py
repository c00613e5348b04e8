"""Every scenario ``fleet chaos`` knows: the nemesis's built-in ones and the broker-side and
environment faults of :mod:`pipeline.chaos.cluster_faults` and the gateway crash windows of
:mod:`pipeline.chaos.crash_faults` and the worker-pool scenarios of :mod:`pipeline.chaos.pool_faults`,
by name, in catalogue order."""

from __future__ import annotations

from . import cluster_faults, crash_faults, nemesis, pool_faults
from .nemesis import Scenario

SCENARIOS: dict[str, Scenario] = dict(
    sorted(
        {
            **nemesis.SCENARIOS,
            **cluster_faults.SCENARIOS,
            **crash_faults.SCENARIOS,
            **pool_faults.SCENARIOS,
        }.items(),
        key=lambda kv: kv[1].number,
    )
)
