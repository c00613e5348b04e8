"""Worker pools: interchangeable members of consumer group ``fleet.pool.<name>`` (issue 10).

Seed 001: partitions as concurrency, commit after processing, dedupe, and a step's stored result
reused on redelivery. ``docs/pools.md`` states the invariants.
"""

from .config import Assignment, PoolConfig
from .handler import PoolHandler

__all__ = ["Assignment", "PoolConfig", "PoolHandler"]
