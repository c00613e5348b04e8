"""bench/bench_outbox.py reads the same rows again each round: ``_unsend`` must make every row
pending for the production read (``FetchSql`` / ``PassCursor``), or the relay's round ships
nothing and the ratio is not measured (it lists active branches only, revision 0016)."""

from __future__ import annotations

from pathlib import Path

from bench.bench_outbox import _fill, _store_only
from pipeline.outbox import backlog
from pipeline.store import make_engine, session_factory


def test_each_round_reads_every_row_again_after_the_last_acked_them(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'outbox.sqlite'}")
    _fill(session_factory(engine), "bench.outbox.t", rows=40, branches=5)
    assert backlog(engine)[0] == 40
    _store_only(engine, 40, ack=True)  # asserts it read all 40; acks them
    assert backlog(engine)[0] == 0
    _store_only(engine, 40, ack=True)  # the next round: all 40 pending again
    engine.dispose()
