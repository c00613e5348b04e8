"""Long-running processes serve their metrics: a ``fleet pool run`` member started with
``--metrics-port`` shows a record it dead-letters in ``fleet_dead_letters_total`` (R-DLQ-3: a
DLQ's inflow must be visible and alertable) and its own store purge in
``fleet_store_rows_purged_total`` (bounded stores, docs/store.md), scraped over HTTP from the
process on the real broker."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.outbox.tables import outbox
from pipeline.pool.submit import submit
from pipeline.runs import Executor, RunJournal
from pipeline.runs.tables import run
from pipeline.store import make_engine, session_factory
from pipeline.support.processes import FleetProcess
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle, unique_name

from .pool_members import STOP_S, effects, start_member

pytestmark = pytest.mark.kafka


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:  # not listening yet
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def test_a_pool_member_serves_its_dead_letters_and_purges(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    pool = unique_name("pool").replace(".", "-")
    topic = TopicNames().pool(pool)
    ensure_pool_topic(kafka.bootstrap, TopicNames(), pool, partitions=1)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    port = _free_port()
    dead = ("fleet_dead_letters_total", (("reason", "HANDLER_REJECTED"),))
    purged = ("fleet_store_rows_purged_total", (("table", "fleet_pool_effects"),))
    proc = start_member(
        tmp_path, pool, kafka.bootstrap, store, "m1",
        "--handler", "tests.integration.pool_poison:step",
        "--metrics-port", str(port),
        "--retention", "pool_effects_s=1", "--retention", "every_s=0.5",
    )  # fmt: skip
    try:
        # the server starts before the first purge pass: its counter appears with that pass
        wait_until(
            lambda: purged in (_scrape(port) or {}),
            timeout_s=60,
            what="a first purge pass",
            interval_s=0.25,
        )
        before = _scrape(port)
        assert before is not None and before.get(dead, 0.0) == 0.0
        assert before[purged] == 0.0, "an empty store: nothing purged"

        submit(kafka.bootstrap, topic, ["ok-1", "poison", "ok-2"])  # no key: dead-lettered

        def moved() -> bool:
            now = _scrape(port) or {}
            return now.get(dead, 0.0) == 1.0 and now.get(purged, 0.0) >= 2.0

        wait_until(
            moved, timeout_s=90, what="the dead letter and the purge in /metrics", interval_s=0.25
        )
        after = _scrape(port)
        assert after is not None and after[dead] == 1.0, "one poison record, one dead letter"
        assert after[("fleet_store_rows", (("table", "fleet_pool_effects"),))] == 0.0
        assert effects(store) == [], "the two effect rows were purged, by the member itself"
    finally:
        assert proc.stop(STOP_S) == 0


def test_a_standalone_relay_purges_its_sent_rows_and_serves_it(
    kafka: BrokerHandle, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``fleet relay run --retention outbox_sent_s=1``: the relay ships every run's rows, then
    deletes them once sent for a second (never one still pending), and its /metrics says so;
    the run journal itself is not the relay's to purge (docs/store.md)."""
    topic = new_topic("relay-purge", partitions=1)
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    engine = make_engine(url)
    Executor(sessions=session_factory(engine), journal=RunJournal(topic=topic)).run_many(
        [("acme", "r1"), ("acme", "r2")], steps=5
    )  # 2 runs x (5 steps + COMPLETED) = 12 outbox rows
    port = _free_port()
    rows = ("fleet_store_rows_purged_total", (("table", "outbox"),))
    proc = FleetProcess(tmp_path / "relay.log", [
        "relay", "run", "--store-url", url, "--bootstrap", kafka.bootstrap,
        "--metrics-port", str(port),
        "--retention", "outbox_sent_s=1", "--retention", "every_s=0.5",
    ]).start()  # fmt: skip
    try:
        wait_until(
            lambda: (_scrape(port) or {}).get(rows) == 12.0,
            timeout_s=90,
            what="the relay to ship and purge 12 rows",
            interval_s=0.25,
        )
        metrics = _scrape(port)
        assert metrics is not None
        assert metrics[("fleet_outbox_published_total", ())] == 12.0
        assert metrics[("fleet_store_rows", (("table", "outbox"),))] == 0.0
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(outbox)).scalar_one() == 0
            assert conn.execute(select(func.count()).select_from(run)).scalar_one() == 2
    finally:
        assert proc.stop(STOP_S) == 0
        engine.dispose()
