"""The watermark prototype behind ``bench outbox``'s figures ships what the relay would, no more.

Bench-only code (``bench/outbox_watermark.py``), but its figures are only worth reading if it
does the relay's whole job: every row shipped, a branch's watermark never past a failed row,
never lowered, never moved across a gap (R-OUT-4: "ack only what the broker accepted").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from bench import outbox_watermark as wm
from pipeline.errors import BrokerError
from pipeline.outbox import write
from pipeline.store import make_engine, session_factory


class _Producer:
    """Reports every record at the next poll; records of ``fail`` (branch, lsn) fail."""

    def __init__(self, fail: set[tuple[str, int]] | None = None) -> None:
        self.pending: list[tuple[Any, bool]] = []
        self.fail = fail or set()
        self.sent: list[tuple[str, int]] = []

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        on_delivery: Any = None,
    ) -> None:
        h = dict(headers)
        at = (h["fleet.branchKey"].decode(), int(h["fleet.lsn"]))
        self.sent.append(at)
        self.pending.append((on_delivery, at in self.fail))

    def poll(self, _timeout: float = 0) -> int:
        pending, self.pending = self.pending, []
        for report, bad in pending:
            report("refused" if bad else None, None)
        return len(pending)

    def flush(self, _timeout: float = 0) -> int:
        return self.poll()


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'wm.sqlite'}")
    with session_factory(engine).begin() as s:
        for i in range(300):  # three branches of unequal length: 150, 100, 50 rows
            branch = "b0" if i < 150 else "b1" if i < 250 else "b2"
            write(s, topic="t", key=b"k", value=b"v", branch_key=branch, tenant="acme")
    wm.reset_design(engine)
    return engine


def _marks(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT branch_key, sent_lsn FROM outbox_branch"))
        return {str(branch): int(mark) for branch, mark in rows}


def test_the_design_relay_ships_every_row_of_unequal_branches_once_in_lsn_order(
    engine: Engine,
) -> None:
    producer = _Producer()
    relay = wm.design_relay(
        engine, bootstrap="unused", batch_size=40, producer_factory=lambda _c: producer
    )
    assert relay.drain() == 300
    assert sorted(producer.sent) == sorted(set(producer.sent))  # none twice
    for branch, n in (("b0", 150), ("b1", 100), ("b2", 50)):
        assert [lsn for b, lsn in producer.sent if b == branch] == list(range(1, n + 1))
    assert _marks(engine) == {"b0": 150, "b1": 100, "b2": 50}
    assert wm.behind_design(engine) == 0


def test_a_failed_row_stops_its_branch_watermark_just_below_it_and_the_next_pass_resumes(
    engine: Engine,
) -> None:
    relay = wm.design_relay(
        engine,
        bootstrap="unused",
        batch_size=40,
        producer_factory=lambda _c: _Producer({("b1", 30)}),
    )
    with pytest.raises(BrokerError):
        relay.drain()
    assert _marks(engine)["b1"] == 29  # never past the failed row, though later rows were confirmed
    retry = _Producer()
    again = wm.design_relay(
        engine, bootstrap="unused", batch_size=40, producer_factory=lambda _c: retry
    )
    again.drain()
    assert next(lsn for b, lsn in retry.sent if b == "b1") == 30  # resent from the failed row
    assert _marks(engine) == {"b0": 150, "b1": 100, "b2": 50}


def test_the_branch_ack_never_lowers_a_watermark_nor_moves_it_across_a_gap(engine: Engine) -> None:
    acker = wm.BranchWatermarkAcker(engine)
    acker.ack([(1, "acme", "b0", 1), (2, "acme", "b0", 2)])
    acker.ack([(5, "acme", "b0", 5), (6, "acme", "b0", 6)])  # lsn 3, 4 not acked: a gap
    assert _marks(engine)["b0"] == 2
    acker.ack([(3, "acme", "b0", 3), (4, "acme", "b0", 4)])
    acker.ack([(1, "acme", "b0", 1)])  # an old ack again
    assert _marks(engine)["b0"] == 4


def test_the_upsert_watermark_is_monotone(engine: Engine) -> None:
    wm.reset(engine)
    acker = wm.WatermarkAcker(engine)
    acker.ack([(1, "acme", "b2", 1), (2, "acme", "b2", 2), (3, "acme", "b2", 3)])
    with engine.begin() as conn:
        conn.exec_driver_sql(wm._UPSERT, ("acme", "b2", 1))  # a late, lower ack
        mark = conn.execute(text(f"SELECT sent_lsn FROM {wm.TABLE}")).scalar_one()
    assert mark == 3
