"""Long-running processes serve their metrics: a ``fleet pool run`` member started with
``--metrics-port`` shows a record it dead-letters in ``fleet_dead_letters_total`` (seed 001: a
DLQ's inflow must be visible and alertable) and its own store purge in
``fleet_store_rows_purged_total`` (bounded stores, docs/store.md), scraped over HTTP from the
process on the real broker."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.pool.submit import submit
from pipeline.testing import BrokerHandle, unique_name

from .pool_members import effects, start_member, stop, wait_for

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
        wait_for(lambda: purged in (_scrape(port) or {}), timeout=60, what="a first purge pass")
        before = _scrape(port)
        assert before is not None and before.get(dead, 0.0) == 0.0
        assert before[purged] == 0.0, "an empty store: nothing purged"

        submit(kafka.bootstrap, topic, ["ok-1", "poison", "ok-2"])  # no key: dead-lettered

        def moved() -> bool:
            now = _scrape(port) or {}
            return now.get(dead, 0.0) == 1.0 and now.get(purged, 0.0) >= 2.0

        wait_for(moved, timeout=90, what="the dead letter and the purge in /metrics")
        after = _scrape(port)
        assert after is not None and after[dead] == 1.0, "one poison record, one dead letter"
        assert after[("fleet_store_rows", (("table", "fleet_pool_effects"),))] == 0.0
        assert effects(store) == [], "the two effect rows were purged, by the member itself"
    finally:
        assert stop(proc) == 0
