"""``wal_checkpoint`` in fleet.toml decides who checkpoints a gateway's SQLite store
(docs/store.md "SQLite: the WAL checkpointed off the writers' path"): a gateway built from the
config, on a real broker and a real SQLite file, as ``fleet gateway run`` builds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bootstrap.gateway import build_gateway
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.store.wal_checkpoint import CHECKPOINTER, FALLBACK_FRAMES
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

SQLITE_DEFAULT_FRAMES = 1000  # SQLite's own wal_autocheckpoint


@pytest.mark.parametrize("mode", ["thread", "writers"])
def test_the_store_is_checkpointed_by_the_thread_or_by_its_writers_as_the_config_says(
    kafka: BrokerHandle, tmp_path: Path, mode: str
) -> None:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    store = tmp_path / "a.sqlite"
    config = GatewayConfig(
        host="A",
        bootstrap=kafka.bootstrap,
        store_url=f"sqlite:///{store}",
        topic_prefix=fleet.prefix,
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
        wal_checkpoint=mode,
    )
    built = build_gateway(config, signer=fleet.signers["A"], trust=fleet.trust)
    built.gateway.start()
    try:
        for i in range(5):  # the store written beside the gateway's own writes
            with built.engine.begin() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO fleet_dedupe (scope, msg_id, seen_at_ms) VALUES (?, ?, ?)",
                    ("test", f"m{i}", i),
                )
        with built.engine.connect() as conn:
            frames = conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
        if mode == "thread":
            assert frames == FALLBACK_FRAMES  # the writers' fallback, raised
            wait_until(
                lambda: (CHECKPOINTER.store_stats(str(store)) or {}).get("checkpoints", 0) > 0,
                timeout_s=15,
                what="the checkpoint thread's first checkpoint of the store",
            )
        else:
            assert frames == SQLITE_DEFAULT_FRAMES  # SQLite's own, untouched
            assert CHECKPOINTER.store_stats(str(store)) is None  # never looked at
    finally:
        built.gateway.stop()
        built.engine.dispose()
