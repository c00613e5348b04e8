"""The WAL checkpointed on a thread of its own (docs/store.md "SQLite: the WAL checkpointed off
the writers' path"): a written WAL is copied back by a look, an unchanged one is not looked
into, the writers keep a fallback, and the last connection closed still removes the WAL.

The checkpointer under test runs without its thread (``thread=False``): each test calls
:meth:`WalCheckpointer.step` itself, on a clock it moves, so nothing here waits on timing."""

from __future__ import annotations

import gc
import logging
import sqlite3
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from pipeline.store import make_engine
from pipeline.store import wal_checkpoint as wc

BOUND_S = 10.0  # a bound for the real thread's first checkpoint, never a measured duration


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Owner:
    """Stands in for an engine: the store is registered while it lives."""


def _writer(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # only the checkpointer copies frames
    conn.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
    return conn


def _write(conn: sqlite3.Connection, rows: int) -> None:
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t VALUES (randomblob(3000))", [()] * rows)
    conn.execute("COMMIT")


def _unbackfilled(path: Path) -> int:
    """Frames in the WAL not yet copied into the database, read from the wal-index (the
    ``-shm`` file: ``mxFrame`` at byte 16 of its header, ``nBackfill`` at byte 96, native
    order; SQLite's WAL-index format) without running a checkpoint, which would copy them."""
    shm = (path.parent / (path.name + "-shm")).read_bytes()
    (mx_frame,) = struct.unpack_from("=I", shm, 16)
    (backfilled,) = struct.unpack_from("=I", shm, 96)
    return int(mx_frame) - int(backfilled)


def _checkpointer() -> tuple[wc.WalCheckpointer, _Clock]:
    clock = _Clock()
    return wc.WalCheckpointer(clock=clock, thread=False), clock


@dataclass
class _Rig:
    """A store written by a plain connection, registered on a checkpointer without its thread."""

    path: Path
    writer: sqlite3.Connection
    ck: wc.WalCheckpointer
    clock: _Clock
    owner: _Owner
    real: str


def _rig(tmp_path: Path) -> _Rig:
    path = tmp_path / "s.db"
    writer = _writer(path)
    ck, clock = _checkpointer()
    owner = _Owner()
    return _Rig(path, writer, ck, clock, owner, ck.register(str(path), owner))


def test_a_written_wal_is_copied_back_by_a_look_and_an_unchanged_one_is_not_looked_into(
    tmp_path: Path,
) -> None:
    rig = _rig(tmp_path)
    path, writer, ck, clock = rig.path, rig.writer, rig.ck, rig.clock
    ck.step()  # the WAL as it was at registration: not this process's to copy
    assert ck.stats()["checkpoints"] == 0

    _write(writer, 50)
    assert _unbackfilled(path) >= 50  # the commit copied nothing back itself
    clock.now += wc.IDLE_S
    ck.step()
    stats = ck.stats()
    assert stats["checkpoints"] == 1 and stats["frames"] >= 50
    assert _unbackfilled(path) == 0

    clock.now += wc.IDLE_S
    ck.step()  # nothing written since: the look is a stat, no checkpoint
    assert ck.stats()["checkpoints"] == 1
    writer.close()


def test_the_pace_follows_the_wal_growth_within_its_bounds(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    path, writer, ck, clock = rig.path, rig.writer, rig.ck, rig.clock
    store = ck._stores[rig.real]
    start = store.every_s

    _write(writer, 2 * wc.TARGET_FRAMES)  # a page a row: more than the target between looks
    clock.now += wc.IDLE_S
    ck.step()
    assert store.every_s == max(wc.MIN_S, start / 2)

    for _ in range(40):  # a trickle: the looks space out, never past MAX_S
        _write(writer, 1)
        clock.now = store.due
        ck.step()
    assert store.every_s == wc.MAX_S
    _write(writer, 1)
    assert _unbackfilled(path) > 0
    clock.now = store.due
    ck.step()
    assert _unbackfilled(path) == 0
    writer.close()


def test_a_commit_after_a_quiet_spell_is_looked_at_now(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    writer, ck, clock, real = rig.writer, rig.ck, rig.clock, rig.real
    ck.step()
    store = ck._stores[real]
    assert store.idle and store.due == clock.now + wc.IDLE_S

    _write(writer, 10)
    ck.nudge(real)  # the engine's commit event
    assert store.due <= clock.now
    ck.step()
    assert ck.stats()["checkpoints"] == 1 and not store.idle
    writer.close()


def test_a_failed_checkpoint_is_counted_logged_once_and_retried_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    ck, clock = _checkpointer()
    owner = _Owner()
    real = ck.register(str(path), owner)
    path.write_bytes(b"not a database" * 512)  # what the checkpoint's connection will meet
    (tmp_path / "s.db-wal").write_bytes(b"written")
    caplog.set_level(logging.WARNING, logger=wc.__name__)
    for i in range(3):
        (tmp_path / "s.db-wal").write_bytes(b"written again" * (i + 2))
        clock.now += wc.MAX_S
        ck.step()
    assert ck.stats() == {"checkpoints": 0, "frames": 0, "failures": 3}
    assert len([r for r in caplog.records if "WAL checkpoint" in r.getMessage()]) == 1
    assert ck._stores[real].due == clock.now + wc.MAX_S


def test_an_engine_gone_takes_its_store_off_the_list(tmp_path: Path) -> None:
    ck, _clock = _checkpointer()
    owner = _Owner()
    other = _Owner()
    real = ck.register(str(tmp_path / "s.db"), owner)
    ck.register(str(tmp_path / "s.db"), other)  # two engines of this process on one file
    del owner
    gc.collect()
    assert real in ck._stores
    del other
    gc.collect()
    assert real not in ck._stores
    assert ck.step() is None  # no store: the thread waits for a registration, no timer


def test_engines_writers_keep_a_fallback_and_the_thread_copies_the_wal(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/on.db")
    off = make_engine(f"sqlite:///{tmp_path}/off.db", background_checkpoint=False)
    with engine.connect() as c, off.connect() as d:
        assert c.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == wc.FALLBACK_FRAMES
        assert d.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
    real = str((tmp_path / "on.db").resolve())
    assert real in wc.CHECKPOINTER._stores
    assert str((tmp_path / "off.db").resolve()) not in wc.CHECKPOINTER._stores
    with engine.begin() as c:
        c.execute(text("CREATE TABLE t (x BLOB)"))
        for _ in range(20):
            c.execute(text("INSERT INTO t VALUES (randomblob(3000))"))
    # the process's thread, nudged by that commit, copies the frames back
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline and _unbackfilled(tmp_path / "on.db"):
        time.sleep(0.01)
    assert _unbackfilled(tmp_path / "on.db") == 0
    assert wc.CHECKPOINTER._stores[real].stats["frames"] >= 20
    assert "fleet-wal-checkpoint" in {t.name for t in threading.enumerate()}
    engine.dispose()
    off.dispose()
    # the last connection closed removes the WAL, as without the thread
    assert not (tmp_path / "on.db-wal").exists()


def test_the_counters_are_the_process_totals_and_never_go_down(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from pipeline.observability.wal_checkpoints import WalCheckpointCollector

    rig = _rig(tmp_path)
    writer, ck, clock = rig.writer, rig.ck, rig.clock
    registry = CollectorRegistry()
    registry.register(WalCheckpointCollector(ck))
    _write(writer, 30)
    clock.now += wc.IDLE_S
    ck.step()
    frames = registry.get_sample_value("fleet_store_wal_checkpoint_frames_total")
    assert registry.get_sample_value("fleet_store_wal_checkpoints_total") == 1
    assert frames is not None and frames >= 30
    writer.close()
    del rig
    gc.collect()  # the store is gone; what it counted stays in the totals
    assert registry.get_sample_value("fleet_store_wal_checkpoints_total") == 1
    assert registry.get_sample_value("fleet_store_wal_checkpoint_frames_total") == frames
    assert registry.get_sample_value("fleet_store_wal_checkpoint_failures_total") == 0
