"""The relay's ack watermark (``outbox_sent.sent_lsn``): the same suite on SQLite and PostgreSQL.

R-OUT-4: a row is sent only once the broker accepted it, and "sent" is a per-branch prefix: the
watermark moves only from ``lo - 1`` to ``hi`` over a confirmed run, never lowers, never crosses a
FAILED row. Every reader (backlog, status, abandon, purge, the run's retention) agrees with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from confluent_kafka import KafkaError, KafkaException
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.bootstrap.retention import RULES
from pipeline.outbox import (
    Relay,
    RowStatus,
    abandon_branch,
    backlog,
    outbox,
    outbox_branch,
    outbox_sent,
    write,
)
from pipeline.outbox.acker import Acker
from pipeline.outbox.sent import is_pending, is_sent
from pipeline.retention import RetentionConfig
from pipeline.retention.purger import Purger
from pipeline.runs.tables import run, run_branch, run_step
from pipeline.store import make_engine, session_factory
from pipeline.store.schema import upgrade

pytestmark = pytest.mark.postgres

NOW_S = 2_000_000_000.0


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


def _write(sessions: sessionmaker[Session], branch: str, n: int, tenant: str = "t") -> None:
    with sessions.begin() as s:
        for _ in range(n):
            write(s, topic="x", key=b"k", value=b"v", branch_key=branch, tenant=tenant)


def _mark(engine: Engine, branch: str, tenant: str = "t") -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(outbox_sent.c.sent_lsn).where(
                    outbox_sent.c.tenant == tenant, outbox_sent.c.branch_key == branch
                )
            ).scalar_one()
        )


def _row(branch: str, lsn: int, tenant: str = "t") -> tuple[Any, ...]:
    return (0, tenant, branch, lsn)  # the fields the acker reads: (id, tenant, branch, lsn)


def _lsns(engine: Engine, where: Any) -> list[int]:
    with engine.connect() as conn:
        return sorted(int(x) for x in conn.execute(select(outbox.c.lsn).where(where)).scalars())


def test_the_ack_never_lowers_a_watermark_nor_moves_it_across_a_gap(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-4: a run [lo, hi] is acked only from lo - 1; a late ack of an older run is a no-op."""
    _write(sessions, "a", 6)
    acker = Acker(engine)
    acker.ack([_row("a", 3), _row("a", 4)])  # lsn 1-2 not sent: no ack at all
    assert _mark(engine, "a") == 0
    acker.ack([_row("a", 1), _row("a", 2), _row("a", 3), _row("a", 4)])
    assert _mark(engine, "a") == 4
    acker.ack([_row("a", 1), _row("a", 2)])  # a repeated, older run
    assert _mark(engine, "a") == 4
    acker.ack([_row("a", 5), _row("a", 6)])
    assert _mark(engine, "a") == 6
    assert _lsns(engine, is_sent()) == [1, 2, 3, 4, 5, 6]
    assert _lsns(engine, is_pending()) == []


def test_a_refused_row_stops_the_watermark_and_nothing_above_it_counts_as_sent(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-3/R-OUT-4: a FAILED lsn 3 keeps the watermark at 2; lsns 4-5 neither ship nor count
    as sent, and the backlog counts them (not the FAILED row)."""
    _write(sessions, "a", 5)
    _write(sessions, "b", 2)
    sent: list[tuple[bytes, bytes]] = []

    class Refusing:
        def produce(self, topic: str, *, value: Any, key: Any, headers: Any, on_delivery: Any):
            h = dict(headers)
            if h["fleet.branchKey"] == b"a" and h["fleet.lsn"] == b"3":
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
            sent.append((h["fleet.branchKey"], h["fleet.lsn"]))
            on_delivery(None, None)

        def poll(self, _t: float = 0) -> int:
            return 0

        def flush(self, _t: float = 0) -> int:
            return 0

    relay = Relay(engine=engine, bootstrap="unused:1", producer_factory=lambda _c: Refusing())
    relay.drain()
    assert (b"a", b"3") not in sent and (b"a", b"4") not in sent
    assert _mark(engine, "a") == 2 and _mark(engine, "b") == 2
    assert _lsns(engine, outbox.c.status == int(RowStatus.FAILED)) == [3]
    assert _lsns(engine, is_pending()) == [4, 5]
    assert backlog(engine)[0] == 2
    sent.clear()
    assert relay.drain() == 0 and sent == []  # the branch stays stopped
    with sessions.begin() as s:
        assert abandon_branch(s, branch_key="a", tenant="t") == 2
    assert backlog(engine) == (0, None)


def test_abandon_drops_only_the_rows_above_the_watermark(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-7 (a rewind): rows already sent stay sent; only unsent ones become DROPPED."""
    _write(sessions, "a", 4)
    Acker(engine).ack([_row("a", 1), _row("a", 2)])
    with sessions.begin() as s:
        assert abandon_branch(s, branch_key="a", tenant="t") == 2
    assert _lsns(engine, is_sent()) == [1, 2]
    assert _lsns(engine, outbox.c.status == int(RowStatus.DROPPED)) == [3, 4]
    Acker(engine).ack([_row("a", 3), _row("a", 4)])  # in flight when abandoned: stays DROPPED
    assert _mark(engine, "a") == 2


def _policy() -> RetentionConfig:
    return RetentionConfig(outbox_sent_s=3600, runs_completed_s=3600)


def _purge(engine: Engine) -> dict[str, int]:
    report = Purger(
        engine=engine, policy=_policy(), rules=RULES, clock=lambda: NOW_S, pause_s=0
    ).run()
    return {str(k): v for k, v in report.rows.items() if v}


def test_the_purge_takes_sent_rows_under_the_watermark_and_none_above(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-STORE-1: unsent rows are never purged; rows under the watermark go past the horizon."""
    old, young = NOW_S - 7200, NOW_S - 600
    with engine.begin() as conn:
        conn.execute(
            insert(outbox_branch),
            {"tenant": "t", "branch_key": "a", "last_lsn": 4, "abandoned": False, "idle_lsn": 2},
        )
        conn.execute(
            insert(outbox_sent),
            {"tenant": "t", "branch_key": "a", "sent_lsn": 2, "abandoned": False},
        )
        conn.execute(
            insert(outbox),
            [
                {"tenant": "t", "branch_key": "a", "lsn": lsn, "topic": "x", "status": 0,
                 "created_at": at}
                for lsn, at in ((1, old), (2, young), (3, old), (4, old))
            ],
        )  # fmt: skip
    assert _purge(engine) == {"outbox": 1}
    assert _lsns(engine, sa.true()) == [2, 3, 4]


def test_a_completed_run_is_purged_once_its_branches_are_under_the_watermark(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """A run with a row above its branch's watermark is unsent, never finished (docs/store.md)."""
    at = NOW_S - 7200
    with engine.begin() as conn:
        for run_id, sent_lsn in (("done", 1), ("open", 0)):
            key = f"t/{run_id}/b1"
            conn.execute(
                insert(run),
                {"tenant": "t", "run_id": run_id, "live_branch": 1, "status": "completed",
                 "created_at": at, "updated_at": at},
            )  # fmt: skip
            conn.execute(
                insert(run_branch),
                {"tenant": "t", "run_id": run_id, "branch": 1, "branch_key": key,
                 "parent": None, "fork_step": 0, "live": True},
            )  # fmt: skip
            conn.execute(
                insert(run_step),
                {"tenant": "t", "run_id": run_id, "branch": 1, "step": 1, "state": "{}",
                 "lsn": 1, "created_at": at},
            )  # fmt: skip
            conn.execute(
                insert(outbox_branch),
                {"tenant": "t", "branch_key": key, "last_lsn": 1, "abandoned": False,
                 "idle_lsn": sent_lsn},
            )  # fmt: skip
            conn.execute(
                insert(outbox_sent),
                {"tenant": "t", "branch_key": key, "sent_lsn": sent_lsn, "abandoned": False},
            )
            conn.execute(
                insert(outbox),
                {"tenant": "t", "branch_key": key, "lsn": 1, "topic": "x", "status": 0,
                 "created_at": at},
            )  # fmt: skip
    _purge(engine)
    with engine.connect() as conn:
        left = set(conn.execute(select(run.c.run_id)).scalars())
        rows = int(conn.execute(select(func.count()).select_from(outbox)).scalar_one())
    assert left == {"open"}
    assert rows == 1  # the open run's unsent row


def test_the_migration_sets_each_watermark_to_the_end_of_its_sent_prefix(store_url: str) -> None:
    """Revision 0012: sent rows keep SENT; the watermark ends before the first PENDING/FAILED."""
    raw = sa.create_engine(store_url)
    try:
        upgrade(raw, "0011_presence_incarnation")
        branches = {"sent": 3, "mid": 4, "stop": 3, "gone": 2, "late": 2}
        statuses = {
            "sent": [1, 1, 1],
            "mid": [1, 1, 0, 0],
            "stop": [1, 3, 0],
            "gone": [1, 2],
            "late": [0, 1],  # SENT after an unsent row: not a prefix
        }
        with raw.begin() as conn:
            for key, last in branches.items():
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned) "
                        "VALUES ('t', :b, :n, :a)"
                    ),
                    {"b": key, "n": last, "a": key == "gone"},
                )
                for lsn, status in enumerate(statuses[key], start=1):
                    conn.execute(
                        sa.text(
                            "INSERT INTO outbox (tenant, branch_key, lsn, topic, status, "
                            "created_at) VALUES ('t', :b, :l, 'x', :s, 1.0)"
                        ),
                        {"b": key, "l": lsn, "s": status},
                    )
        upgrade(raw)
        with raw.connect() as conn:
            marks = dict(
                conn.execute(sa.text("SELECT branch_key, sent_lsn FROM outbox_sent")).all()
            )
            late = conn.execute(
                sa.text("SELECT lsn, status FROM outbox WHERE branch_key = 'late' ORDER BY lsn")
            ).all()
        assert marks == {"sent": 3, "mid": 2, "stop": 1, "gone": 2, "late": 0}
        assert [tuple(r) for r in late] == [(1, 0), (2, 0)]  # shipped again, never lost
    finally:
        raw.dispose()


def test_the_relays_held_connections_keep_no_transaction_and_a_failed_ack_is_retried(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-4: the acker and the reader keep their connections (SQLite) between uses, with no
    transaction open on them: a writer commits at once after each, each read sees every commit
    made before it, and an ack that fails is reported (its rows go out again) and the next ack
    runs on a fresh connection."""
    from pipeline.errors import StoreError
    from pipeline.outbox.fetch import FetchSql, OutboxReader
    from pipeline.store import readonly

    reader = OutboxReader(
        readonly(engine), FetchSql(engine.dialect.paramstyle, tenant=None, limit=10)
    )
    acker = Acker(engine)
    _write(sessions, "a", 2)
    assert [r[3] for r in reader.read(first=True, stopped=set())] == [1, 2]
    acker.ack([_row("a", 1)])
    _write(sessions, "a", 1)  # would wait (then fail) behind a transaction left open
    assert [r[3] for r in reader.read(first=True, stopped=set())] == [2, 3]
    with engine.begin() as conn:  # the ack's statement cannot run: the ack fails
        conn.exec_driver_sql("ALTER TABLE outbox_sent RENAME TO outbox_sent_away")
    with pytest.raises(StoreError, match="cannot ack"):
        acker.ack([_row("a", 2)])
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE outbox_sent_away RENAME TO outbox_sent")
    acker.ack([_row("a", 2), _row("a", 3)])
    assert _mark(engine, "a") == 3
    assert reader.read(first=True, stopped=set()) == []
    acker.close()
    reader.close()


def _idle(engine: Engine, branch: str, tenant: str = "t") -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(outbox_branch.c.idle_lsn).where(
                    outbox_branch.c.tenant == tenant, outbox_branch.c.branch_key == branch
                )
            ).scalar_one()
        )


def _listed(engine: Engine) -> list[str]:
    from pipeline.outbox.fetch import FetchSql

    sql, params = FetchSql(engine.dialect.paramstyle, tenant=None, limit=10).branches()
    with engine.connect() as conn:
        return sorted(str(r[1]) for r in conn.exec_driver_sql(sql, params))


def test_an_ack_of_a_branchs_last_row_takes_it_out_of_the_relays_listing(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-4: a branch is listed (the index of branches that may have unsent rows) while any
    row is above its watermark; the ack of its last row marks it idle, a new row lists it again."""
    _write(sessions, "a", 3)
    _write(sessions, "b", 1)
    acker = Acker(engine)
    acker.ack([_row("a", 1), _row("a", 2)])
    assert _listed(engine) == ["a", "b"] and _idle(engine, "a") == 0
    acker.ack([_row("a", 3), _row("b", 1)])
    assert _listed(engine) == [] and (_idle(engine, "a"), _idle(engine, "b")) == (3, 1)
    assert backlog(engine) == (0, None)
    _write(sessions, "a", 1)
    assert _listed(engine) == ["a"] and backlog(engine)[0] == 1
    assert _lsns(engine, is_pending()) == [4]


def test_the_ack_never_waits_for_a_writer_holding_its_branch(store_url: str) -> None:
    """R-OUT-4 on PostgreSQL: a writer holds its branch's lsn counter row until it commits; the
    ack's watermark is a row of its own, so it moves meanwhile (the ack's connection gives up on
    any lock wait at once, so a wait fails the test instead of hanging it). The branch is marked
    idle only by an ack after the writer's row."""
    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: nothing to wait for")
    writer = make_engine(store_url)
    impatient = make_engine(store_url, connect_args={"options": "-c lock_timeout=1"})
    sessions = session_factory(writer)
    try:
        _write(sessions, "a", 2)
        acker = Acker(impatient)
        with sessions.begin() as open_tx:
            write(open_tx, topic="x", key=b"k", value=b"v", branch_key="a", tenant="t")
            acker.ack([_row("a", 1), _row("a", 2)])  # lsn 3 uncommitted, its row locked
            assert _mark(writer, "a") == 2
            assert _idle(writer, "a") == 0  # passed by: the writer's lsn 3 is coming
        acker.ack([_row("a", 3)])
        assert (_mark(writer, "a"), _idle(writer, "a")) == (3, 3)
        acker.close()
    finally:
        writer.dispose()
        impatient.dispose()


def test_the_migration_moves_each_watermark_to_its_own_row(store_url: str) -> None:
    """Revision 0014: ``outbox_branch.sent_lsn`` moves to ``outbox_sent`` (with ``abandoned``);
    the branch keeps it as ``idle_lsn``, so the same branches stay listed; and back."""
    raw = sa.create_engine(store_url)
    try:
        upgrade(raw, "0013_spawn_pid_start")
        with raw.begin() as conn:
            for key, last, sent, gone in (("done", 3, 3, False), ("mid", 4, 2, False),
                                          ("gone", 2, 1, True)):  # fmt: skip
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, "
                        "sent_lsn) VALUES ('t', :b, :n, :a, :s)"
                    ),
                    {"b": key, "n": last, "a": gone, "s": sent},
                )
        upgrade(raw)
        with raw.connect() as conn:
            moved = {
                r[0]: (int(r[1]), bool(r[2]))
                for r in conn.execute(
                    sa.text("SELECT branch_key, sent_lsn, abandoned FROM outbox_sent")
                )
            }
            idle = dict(
                conn.execute(sa.text("SELECT branch_key, idle_lsn FROM outbox_branch")).all()
            )
        assert moved == {"done": (3, False), "mid": (2, False), "gone": (1, True)}
        assert idle == {"done": 3, "mid": 2, "gone": 1}
        assert _listed(raw) == ["mid"]
        with raw.begin() as conn:
            conn.execute(sa.text("UPDATE outbox_sent SET sent_lsn = 4 WHERE branch_key = 'mid'"))
        with raw.begin() as conn:  # the revision's downgrade, as `alembic downgrade` runs it
            from alembic import command

            from pipeline.store.schema import _config

            command.downgrade(_config(conn), "0013_spawn_pid_start")
        with raw.connect() as conn:
            back = dict(
                conn.execute(sa.text("SELECT branch_key, sent_lsn FROM outbox_branch")).all()
            )
        assert back == {"done": 3, "mid": 4, "gone": 1}
    finally:
        raw.dispose()


def test_the_migration_lists_the_same_branches_by_their_flag(store_url: str) -> None:
    """Revision 0016: the listing's index reads ``active`` (set to ``last_lsn > idle_lsn``), so
    the same branches stay listed; a send's lsn upsert no longer sets a column of the index's
    condition; and back."""
    raw = sa.create_engine(store_url)
    try:
        upgrade(raw, "0015_outbox_no_pending_index")
        with raw.begin() as conn:
            for key, last, idle, gone in (("done", 3, 3, False), ("mid", 4, 2, False),
                                          ("gone", 2, 1, True)):  # fmt: skip
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox_branch (tenant, branch_key, last_lsn, abandoned, "
                        "idle_lsn) VALUES ('t', :b, :n, :a, :i)"
                    ),
                    {"b": key, "n": last, "a": gone, "i": idle},
                )
                conn.execute(
                    sa.text(
                        "INSERT INTO outbox_sent (tenant, branch_key, sent_lsn, abandoned) "
                        "VALUES ('t', :b, :i, :a)"
                    ),
                    {"b": key, "a": gone, "i": idle},
                )
        upgrade(raw)
        with raw.connect() as conn:
            active = {
                r[0]: bool(r[1])
                for r in conn.execute(sa.text("SELECT branch_key, active FROM outbox_branch"))
            }
        assert active == {"done": False, "mid": True, "gone": True}
        assert _listed(raw) == ["mid"]
        with raw.begin() as conn:  # the revision's downgrade, as `alembic downgrade` runs it
            from alembic import command

            from pipeline.store.schema import _config

            command.downgrade(_config(conn), "0015_outbox_no_pending_index")
        with raw.connect() as conn:
            listed = sorted(
                r[0]
                for r in conn.execute(
                    sa.text(
                        "SELECT branch_key FROM outbox_branch "
                        "WHERE last_lsn > idle_lsn AND NOT abandoned"
                    )
                )
            )
            columns = {c["name"] for c in sa.inspect(conn).get_columns("outbox_branch")}
        assert listed == ["mid"] and "active" not in columns
    finally:
        raw.dispose()


def test_a_write_to_a_branch_found_all_sent_lists_it_and_others_leave_the_flag_alone(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    """R-OUT-4: the writer that finds its branch idle sets ``active`` (the relay lists it again),
    one that finds it set does not write it (tables.py: no index write per send)."""
    _write(sessions, "a", 2)
    Acker(engine).ack([_row("a", 1), _row("a", 2)])
    assert _listed(engine) == []
    updates: list[str] = []  # the writer runs DB-API text: traced at the driver (SQLite)
    with sessions.begin() as session:
        dbapi = session.connection().connection.dbapi_connection
        if engine.dialect.name == "sqlite":
            dbapi.set_trace_callback(updates.append)
        write(session, topic="x", key=b"k", value=b"v", branch_key="a", tenant="t")
        write(session, topic="x", key=b"k", value=b"v", branch_key="a", tenant="t")
        if engine.dialect.name == "sqlite":
            dbapi.set_trace_callback(None)
    assert _listed(engine) == ["a"]
    assert _lsns(engine, is_pending()) == [3, 4]
    if engine.dialect.name == "sqlite":
        assert sum("SET active" in s for s in updates) == 1, updates
