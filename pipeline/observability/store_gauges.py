"""The exporter's :class:`~pipeline.observability.ports.StoreGauges` over one or more SQL stores.

Each gauge is one aggregate query per store per sample cycle, through the functions the owning
subsystems already expose (``HeldStore.pending_count``, ``QuarantineStore.quarantined_keys``,
``outbox.status.backlog``): the SQL lives once, beside its tables. The per-store reads are
:class:`~.store_reader.StoreReader`'s, the same ``fleet top`` shows per host. A fleet may keep gateways'
held stores and the application's outbox in different databases, so several stores are summed
(the oldest-unsent age is their maximum). A store without one of the tables (say, a gateway's
SQLite with no outbox) contributes 0 to that gauge; the check is repeated until the table
appears, then never again.

Reads are read-only: on SQLite they begin DEFERRED under WAL, so a scrape never takes the write
lock a gateway or relay is waiting for. The exporter never creates tables in a store it reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from pipeline.errors import ConfigError
from pipeline.store import make_engine

from .store_reader import StoreReader

REUSE_S = 1.0


class SqlStoreGauges:
    """Held messages, quarantined keys and outbox backlog for ``fleet exporter --store-url``
    (R-OBS-5: alert on the quarantine and the oldest unsent row; R-OUT-7: outbox backlog is
    one of the two numbers that grow silently)."""

    def __init__(self, engines: Sequence[Engine], *, clock: Callable[[], float] = time.time):
        if not engines:
            raise ConfigError("store gauges need at least one store")
        self._stores = [StoreReader(e) for e in engines]
        self._clock = clock
        # outbox_backlog() reads (count, oldest) in one query; the sampler asks for the age
        # right after, so it is answered from the same read: one query, and a consistent pair.
        # A read older than REUSE_S (a caller asking for the age alone) is not reused.
        self._outbox_read: list[tuple[int, float | None]] | None = None
        self._outbox_read_at = 0.0

    @classmethod
    def from_urls(cls, urls: Sequence[str]) -> SqlStoreGauges:
        """Engines for ``urls``; a SQLite file that does not exist is a typo, not an empty fleet."""
        for url in urls:
            parsed = make_url(url)
            db = parsed.database or ":memory:"
            if (
                parsed.get_backend_name() == "sqlite"
                and db != ":memory:"
                and not Path(db).is_file()
            ):
                raise ConfigError(f"--store-url {url}: no such SQLite file")
        return cls([make_engine(url, create=False) for url in urls])

    def held_messages(self) -> int:
        return sum(s.held_messages() for s in self._stores)

    def quarantined_keys(self) -> int:
        return sum(s.quarantined_keys() for s in self._stores)

    def outbox_backlog(self) -> int:
        self._outbox_read = [s.outbox() for s in self._stores]
        self._outbox_read_at = time.monotonic()
        return sum(count for count, _ in self._outbox_read)

    def oldest_unsent_age_seconds(self) -> float:
        reads = self._outbox_read
        if reads is None or time.monotonic() - self._outbox_read_at > REUSE_S:
            reads = [s.outbox() for s in self._stores]
        self._outbox_read = None
        oldest = [at for _, at in reads if at is not None]
        return max(0.0, self._clock() - min(oldest)) if oldest else 0.0

    def close(self) -> None:
        for store in self._stores:
            store.owned.dispose()
