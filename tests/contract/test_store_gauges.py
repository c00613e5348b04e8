"""The exporter's store gauges on SQLite (WAL) and real PostgreSQL, over rows written through the
owning subsystems' own APIs (held store, ``outbox.write`` + the relay, ``QuarantineStore``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import ConfigError
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.host.held import HeldStore, held_table
from pipeline.observability.store_gauges import SqlStoreGauges
from pipeline.outbox import Relay, backlog, write
from pipeline.store import make_engine, session_factory
from tests.contract.test_gateway_store import _held
from tests.contract.test_outbox_store import FakeProducer

SCOPE = Scope("fleet.gw.h1", "fleet.inbox.h1")


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    made = make_engine(store_url)
    yield made
    made.dispose()


@pytest.fixture
def gauges(store_url: str, engine: Engine) -> Iterator[SqlStoreGauges]:
    made = SqlStoreGauges.from_urls([store_url])
    yield made
    made.close()


def _read(gauges: SqlStoreGauges) -> tuple[int, int, int, float]:
    """In the order the sampler asks (backlog, then age: one outbox read)."""
    return (
        gauges.held_messages(),
        gauges.quarantined_keys(),
        gauges.outbox_backlog(),
        gauges.oldest_unsent_age_seconds(),
    )


def test_empty_store_reads_zero(gauges: SqlStoreGauges) -> None:
    assert _read(gauges) == (0, 0, 0, 0.0)


def test_held_counts_undrained_rows_and_drops_after_a_poll(
    engine: Engine, gauges: SqlStoreGauges
) -> None:
    """R-HOLD-1: a held message counts until its recipient drains it."""
    sessions = session_factory(engine)
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("main-a", f"m{i}") for i in range(5)])
        s.execute(insert(held_table), [_held("main-b", f"n{i}") for i in range(2)])
    assert gauges.held_messages() == 7
    drained = HeldStore(sessions).poll("main-a", limit=3)
    assert len(drained) == 3
    assert gauges.held_messages() == 4
    HeldStore(sessions).poll("main-a")
    HeldStore(sessions).poll("main-b")
    assert gauges.held_messages() == 0


def test_quarantined_keys_counts_keys_not_parked_records(
    engine: Engine, gauges: SqlStoreGauges
) -> None:
    """R-OBS-5: the gauge is the number of quarantined keys; released keys leave it."""
    store = QuarantineStore(engine)
    for key in ("K1", "K2", "K3"):
        with Session(engine) as s, s.begin():
            store.quarantine(
                s, SCOPE, key, reason="RETRIES_EXHAUSTED", dead_letter_ref="d:0:1", record=None
            )
    with Session(engine) as s, s.begin():  # a second scope: keys are counted per scope
        store.quarantine(
            s,
            Scope("fleet.gw.h2", "fleet.inbox.h2"),
            "K1",
            reason="X",
            dead_letter_ref="d:0:2",
            record=None,
        )
    assert gauges.quarantined_keys() == 4
    store.take_for_release(SCOPE, "K2")
    with Session(engine) as s, s.begin():
        store.complete_release(s, SCOPE, "K2")
    assert gauges.quarantined_keys() == 3


def test_outbox_backlog_and_oldest_age_until_the_relay_acks(engine: Engine, store_url: str) -> None:
    """R-OUT-7: backlog and oldest-unsent age grow silently until the relay ships; after
    the relay's ack both read 0."""
    now = {"t": 0.0}
    gauges = SqlStoreGauges([make_engine(store_url, create=False)], clock=lambda: now["t"])
    sessions: sessionmaker[Session] = session_factory(engine)
    try:
        with sessions.begin() as s:
            for branch in ("a", "b"):
                for _ in range(3):
                    write(s, topic="t", key=branch.encode(), value=b"v", branch_key=branch)
        created = _oldest_created(engine)
        now["t"] = created + 42.5
        held, keys, rows, age = _read(gauges)
        assert (held, keys, rows) == (0, 0, 6)
        assert age == pytest.approx(42.5, abs=1e-3)
        relay = Relay(
            engine=engine, bootstrap="unused:1", producer_factory=lambda _c: FakeProducer(_never)
        )
        assert relay.drain() == 6
        relay.close()
        assert _read(gauges) == (0, 0, 0, 0.0)
    finally:
        gauges.close()


def test_several_stores_are_summed_and_a_missing_table_counts_zero(
    engine: Engine, tmp_path: Path
) -> None:
    """A gateway's own SQLite (held only) next to the application store: gauges add up."""
    bare = tmp_path / "gateway.sqlite"
    make_engine(f"sqlite:///{bare}", create=False).dispose()  # a store with no fleet tables yet
    with session_factory(engine).begin() as s:
        s.execute(insert(held_table), [_held("m", str(i)) for i in range(3)])
        write(s, topic="t", key=b"k", value=b"v", branch_key="k")
    gauges = SqlStoreGauges([engine, make_engine(f"sqlite:///{bare}", create=False)])
    assert (gauges.held_messages(), gauges.outbox_backlog()) == (3, 1)
    other = make_engine(f"sqlite:///{bare}")  # the gateway starts and creates its tables
    with session_factory(other).begin() as s:
        s.execute(insert(held_table), [_held("m", str(i)) for i in range(2)])
    assert gauges.held_messages() == 5
    other.dispose()
    gauges.close()


def test_a_sqlite_path_that_does_not_exist_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such SQLite file"):
        SqlStoreGauges.from_urls([f"sqlite:///{tmp_path / 'typo.sqlite'}"])
    assert not (tmp_path / "typo.sqlite").exists()


def _never(_headers: Any) -> bool:
    return False


def _oldest_created(engine: Engine) -> float:
    _count, oldest = backlog(engine)
    assert oldest is not None
    return oldest


def test_fleet_exporter_refuses_a_store_url_that_does_not_exist(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli.main import app

    typo = f"sqlite:///{tmp_path / 'typo.sqlite'}"
    result = CliRunner().invoke(app, ["exporter", "--bootstrap", "unused:1", "--store-url", typo])
    assert result.exit_code == 1, result.output
    assert "no such SQLite file" in result.output


def test_age_asked_alone_reads_the_outbox_afresh(engine: Engine, store_url: str) -> None:
    """The backlog/age pair shares one read only when asked together (as the sampler does)."""
    now = {"t": 0.0}
    gauges = SqlStoreGauges([make_engine(store_url, create=False)], clock=lambda: now["t"])
    try:
        assert gauges.outbox_backlog() == 0
        assert gauges.oldest_unsent_age_seconds() == 0.0  # consumes the shared read
        with session_factory(engine).begin() as s:
            write(s, topic="t", key=b"k", value=b"v", branch_key="k")
        now["t"] = _oldest_created(engine) + 10.0
        assert gauges.oldest_unsent_age_seconds() == pytest.approx(10.0, abs=1e-3)
        assert gauges.outbox_backlog() == 1
    finally:
        gauges.close()
