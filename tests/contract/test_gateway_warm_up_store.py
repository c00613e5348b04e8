"""The gateway's store warm-up runs on both stores and leaves nothing behind.

At subscribe the inbox runtime stages its usual writes once in a transaction it rolls back (the
dedupe claim, a held row, the receipts' settle and state read: ``ConsumerRuntime.warm_up`` and
the handlers' ``warm``), so the first batch does not pay the statements' first use. Until
0.13 the warm-up's msgId held a NUL byte, which PostgreSQL's text columns refuse: on PostgreSQL
the warm-up was skipped at every start (a log line), and the first batch paid it after all.
Built as production builds it (``build_gateway``), Kafka clients stubbed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipeline.host.config import GatewayConfig
from pipeline.host.entity_config import EntityConfig
from pipeline.host.held import held_table
from pipeline.host.tracking import forward_table
from pipeline.presence.roles import Delivery, Role
from pipeline.runtime.dedupe import dedupe_table
from tests.unit.test_bootstrap_factories import build_stubbed

pytestmark = pytest.mark.postgres


def test_the_inbox_warm_up_runs_and_writes_nothing(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = GatewayConfig(
        host="h1",
        bootstrap="nowhere:1",
        store_url=store_url,
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
        socket_path=None,
    )
    parts = build_stubbed(config)
    try:
        with caplog.at_level(logging.INFO, logger="pipeline.runtime.loop"):
            parts.runtime.warm_up()
        skipped = [r.getMessage() for r in caplog.records if "warm-up skipped" in r.getMessage()]
        assert skipped == []
        with parts.engine.connect() as conn:
            for table in (dedupe_table, held_table, forward_table):
                assert conn.execute(select(func.count()).select_from(table)).scalar_one() == 0
    finally:
        parts.relay.close()
        parts.engine.dispose()
