"""The process's SQLite WAL checkpoints (:mod:`pipeline.store.wal_checkpoint`) as counters.

Read from the checkpoint thread's totals at scrape time: checkpoints run, the new WAL frames
they found (4 KiB pages a writer committed since the checkpoint before), and the checkpoints
that failed (the writers' own checkpoint stands meanwhile; the log names the store).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily

from pipeline.store.wal_checkpoint import CHECKPOINTER, WalCheckpointer

_FAMILIES = (
    (
        "checkpoints",
        "fleet_store_wal_checkpoints",
        "SQLite WAL checkpoints run off the writers' path",
    ),
    ("frames", "fleet_store_wal_checkpoint_frames", "New WAL frames those checkpoints found"),
    ("failures", "fleet_store_wal_checkpoint_failures", "SQLite WAL checkpoints that failed"),
)


class WalCheckpointCollector:
    def __init__(self, checkpointer: WalCheckpointer = CHECKPOINTER) -> None:
        self.checkpointer = checkpointer

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.checkpointer.stats()
        for key, name, doc in _FAMILIES:
            yield CounterMetricFamily(name, doc, value=stats[key])


def register_wal_checkpoints(registry: CollectorRegistry) -> WalCheckpointCollector:
    """Add the checkpoint counters to ``registry`` (one per process)."""
    collector = WalCheckpointCollector()
    registry.register(collector)
    return collector
