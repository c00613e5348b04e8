"""Worker pools: interchangeable members of consumer group ``fleet.pool.<name>``.

R-POOL-1, R-POOL-3, R-POOL-4: partitions as concurrency, commit after processing, dedupe, and a step's stored result
reused on redelivery. ``docs/pools.md`` states the invariants.
"""

from .config import Assignment, PoolConfig
from .handler import PoolHandler

__all__ = ["Assignment", "PoolConfig", "PoolHandler"]
