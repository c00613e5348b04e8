"""Store contract suite for bounded stores: the purger's rules and batches on SQLite and
PostgreSQL. R-STORE-1 decides the dedupe horizon; rows in use are never purged."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, func, insert, select

from pipeline.bootstrap.retention import RULES, purger_for
from pipeline.control import requests, spawns, stops
from pipeline.effects.saga_model import SagaState
from pipeline.effects.saga_tables import saga
from pipeline.effects.tables import KeyState, idempotency
from pipeline.failures import quarantine_model
from pipeline.failures.quarantine_tables import release_table
from pipeline.failures.reporter import reported_table
from pipeline.host import inject_journal as journal
from pipeline.host import tracking
from pipeline.host.conversations import ANSWERED, WAITING, turns_table, waiters_table
from pipeline.host.held import held_table
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.pool.tables import effects_table, members_table
from pipeline.retention import RetentionConfig
from pipeline.retention.metrics import RetentionMetrics
from pipeline.retention.purger import Purger
from pipeline.retention.rules import StoreTable
from pipeline.retention.stats import store_stats
from pipeline.runs.tables import run, run_branch, run_step
from pipeline.runtime.dedupe import dedupe_table
from pipeline.store import make_engine

pytestmark = pytest.mark.postgres

NOW_S = 2_000_000_000.0  # the purger's clock (epoch seconds)
NOW = int(NOW_S * 1000)
HOUR = 3_600_000
DLQ_S = 14 * 86400 + 3600  # reporter rows: the DLQ's 14 days + the 1 h replay window
# every finished row older than an hour may go; the dedupe horizon is 10 h (9 h topic + 1 h)
POLICY = RetentionConfig(
    outbox_sent_s=3600,
    tracking_finished_s=3600,
    failed_reported_s=DLQ_S,
    held_drained_s=3600,
    turns_closed_s=3600,
    dedupe_s=10 * 3600,
    inbox_topic_s=9 * 3600,
    replay_window_s=3600,
    runs_completed_s=3600,
    quarantine_released_s=3600,
    sagas_finished_s=10 * 3600,  # the saga topics' 9 h + the 1 h replay window
    saga_topic_s=9 * 3600,
    pool_effects_s=3600,
    pool_members_stale_s=3600,
    batch_rows=3,
    max_batches=100,
)


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


def _outbox(lsn: int, status: RowStatus, age_ms: int, branch: str = "b") -> dict[str, Any]:
    at = (NOW - age_ms) / 1000.0
    return {
        "tenant": "t",
        "branch_key": branch,
        "lsn": lsn,
        "topic": "x",
        "key": b"k",
        "value": b"v" * 100,
        "headers": None,
        "status": int(status),
        "created_at": at,
        "sent_at": at if status is RowStatus.SENT else None,
    }


def _held(i: int, *, drained_ago_ms: int | None) -> dict[str, Any]:
    return {
        "recipient": "r",
        "msg_id": f"m{i}",
        "kind": "SEND",
        "sender": "s",
        "trace_id": None,
        "turn_id": None,
        "body": b"x",
        "headers": None,
        "topic": None,
        "ts_ms": NOW - 10 * HOUR,
        "expires_at_ms": NOW + HOUR,
        "held_at_ms": NOW - 10 * HOUR,
        "drained_at_ms": None if drained_ago_ms is None else NOW - drained_ago_ms,
    }


def _seed(engine: Engine) -> None:
    """Per table: rows that may go (old and finished) and rows that must stay."""
    old, young = 2 * HOUR, HOUR // 2
    with engine.begin() as conn:
        conn.execute(
            insert(outbox),
            [_outbox(i + 1, RowStatus.SENT, old) for i in range(7)]  # 7 purgeable
            + [_outbox(8, RowStatus.SENT, young)]  # sent, too young
            + [_outbox(9, RowStatus.PENDING, 100 * HOUR)]  # unsent: never
            + [_outbox(1, RowStatus.FAILED, 100 * HOUR, "f")]  # refused, unsent: never
            + [_outbox(2, RowStatus.PENDING, 100 * HOUR, "f")]  # held back behind it: never
            + [_outbox(1, RowStatus.DROPPED, old, "d")],  # never to be sent: purgeable
        )
        conn.execute(
            insert(held_table),
            [_held(i, drained_ago_ms=old) for i in range(5)]  # 5 purgeable
            + [_held(5, drained_ago_ms=young)]
            + [_held(6 + i, drained_ago_ms=None) for i in range(4)],  # undrained: never
        )
        conn.execute(
            insert(tracking.forward_table),
            [
                {
                    "msg_id": f"f{i}",
                    "sender": "s",
                    "recipient": "r",
                    "trace_id": "t",
                    "sent_ms": NOW - 100 * HOUR,
                    "deadline_ms": NOW - (old if i < 4 else young),
                    "state": tracking.INJECTED if state == "x" else state,
                }
                for i, state in enumerate(
                    (tracking.INJECTED, tracking.FAILED, tracking.INJECTED, tracking.PENDING, "x")
                )
            ],  # 3 purgeable; the pending one past its deadline stays (its FAILED is due)
        )
        conn.execute(
            insert(journal.journal_table),
            [
                {
                    "msg_id": f"j{i}",
                    "gid": "w",
                    "sender": "s",
                    "reply_host": "A",
                    "trace_id": "t",
                    "opened_ms": NOW - 100 * HOUR,
                    "closed_ms": None if state == journal.OPEN else NOW - closed_ago,
                    "state": state,
                }
                for i, (state, closed_ago) in enumerate(
                    (
                        (journal.INJECTED, old),
                        (journal.UNCERTAIN, old),
                        (journal.FAILED, young),
                        (journal.OPEN, 0),  # a crash left it open: reported at restart, never
                    )
                )
            ],  # 2 purgeable
        )
        conn.execute(
            insert(turns_table),
            [
                {
                    "turn_id": f"t{i}",
                    "asker": "a",
                    "asked": "b",
                    "ask_msg_id": f"a{i}",
                    "opened_ms": NOW - 100 * HOUR,
                    "expires_at_ms": NOW - old,
                    "state": ANSWERED if i < 2 else WAITING,
                }
                for i in range(3)
            ],  # 2 purgeable; a waiting turn stays even past expiry (its notice is due)
        )
        conn.execute(
            insert(dedupe_table),
            [
                {"scope": "g", "msg_id": f"d{i}", "seen_at_ms": NOW - (11 if i < 6 else 9) * HOUR}
                for i in range(8)
            ],  # 6 past the 10 h horizon, 2 inside it
        )
        conn.execute(
            insert(reported_table),
            [
                {
                    "original_msg_id": f"o{i}",
                    "failed_msg_id": f"failed-o{i}",
                    "sender": "s",
                    "reason": "EXPIRED",
                    "dead_letter_ref": "dlq:0:1",
                    "reported_ms": NOW - (DLQ_S * 1000 + HOUR if i == 0 else HOUR),
                }
                for i in range(2)
            ],  # 1 purgeable
        )
        conn.execute(
            insert(waiters_table),
            [
                {"waiter_id": "w0", "gid": "g", "opened_ms": NOW - HOUR, "expires_ms": NOW - 1},
                {"waiter_id": "w1", "gid": "g", "opened_ms": NOW, "expires_ms": NOW + HOUR},
            ],
        )
        conn.execute(
            insert(idempotency),
            [
                {
                    "key_class": "c",
                    "idem_key": f"k{i}",
                    "payload_hash": "h",
                    "state": int(KeyState.SUCCEEDED),
                    "result": None,
                    "attempt": 1,
                    "created_at_ms": NOW - HOUR,
                    "completed_at_ms": NOW - HOUR,
                    "lease_until_ms": NOW,
                    "expires_at_ms": exp,
                }
                for i, exp in enumerate([NOW - 1, None, NOW + HOUR])
            ],
        )

        _seed_lifecycle(conn)
        _seed_runs(conn)
        _seed_sagas_pools_releases(conn)


def _seed_lifecycle(conn: Any) -> None:
    """fleet_spawns and fleet_stops keep the 10 h dedupe horizon (they dedupe the control
    topic); a running worker's row or a STOP in progress stays whatever its age."""
    long_ago, inside = NOW - 11 * HOUR, NOW - 9 * HOUR
    spawn_rows = [  # (state, ended_ms): 3 purgeable
        (spawns.REAPED, long_ago), (spawns.FAILED, None), (spawns.REFUSED, None),
        (spawns.REAPED, inside), (spawns.LIVE, None), (spawns.LAUNCHING, None),
        (spawns.STOPPING, None),
    ]  # fmt: skip
    conn.execute(
        insert(spawns.spawns_table),
        [
            {
                "spawn_id": f"w{i}",
                "request_msg_id": f"s{i}",
                "requester": "m",
                "requester_host": "A",
                "profile": "p",
                "state": state,
                "created_ms": long_ago,
                "ended_ms": ended,
            }
            for i, (state, ended) in enumerate(spawn_rows)
        ],
    )
    stop_rows = [(stops.DONE, long_ago), (stops.REFUSED, long_ago), (stops.DONE, inside),
                 (stops.STOPPING, long_ago)]  # fmt: skip
    conn.execute(
        insert(stops.stops_table),
        [
            {
                "stop_id": f"x{i}",
                "gid": "w0",
                "request_msg_id": f"x{i}",
                "requester": "m",
                "requester_host": "A",
                "trace_id": "t",
                "state": state,
                "created_ms": created,
            }
            for i, (state, created) in enumerate(stop_rows)
        ],
    )
    conn.execute(
        insert(requests.stop_requests_table),
        [
            {
                "msg_id": f"r{i}",
                "stop_id": f"x{i}",
                "gid": "w0",
                "requester": "m",
                "host": "B",
                "trace_id": "t",
                "sent_ms": NOW - 100 * HOUR,
                "deadline_ms": NOW - 2 * HOUR,
                "state": state,
            }
            for i, state in enumerate((requests.STOPPED, requests.FAILED, requests.PENDING))
        ],
    )


def _seed_runs(conn: Any) -> None:
    """Run journal: a completed run goes with its branches and steps once its outbox rows are
    all sent; a running run, a recent one and one with an unsent row stay whole."""
    old, young = (NOW - 2 * HOUR) / 1000.0, (NOW - HOUR // 2) / 1000.0
    runs = [  # (run_id, status, updated_at, outbox status of its rows)
        ("done", "completed", old, RowStatus.SENT),  # purgeable: 1 run, 2 branches, 3 steps
        ("live", "running", old, RowStatus.SENT),  # running: never
        ("fresh", "completed", young, RowStatus.SENT),  # completed too recently
        ("stuck", "completed", old, RowStatus.FAILED),  # a refused row stops its branch: never
    ]
    for n, (run_id, status, at, row_status) in enumerate(runs):
        conn.execute(
            insert(run),
            {"tenant": "t", "run_id": run_id, "live_branch": 2, "status": status,
             "created_at": at, "updated_at": at},
        )  # fmt: skip
        conn.execute(
            insert(run_branch),
            [
                {"tenant": "t", "run_id": run_id, "branch": b, "branch_key": f"t/{run_id}/b{b}",
                 "parent": None if b == 1 else 1, "fork_step": b - 1, "live": b == 2}
                for b in (1, 2)
            ],
        )  # fmt: skip
        conn.execute(
            insert(run_step),
            [
                {"tenant": "t", "run_id": run_id, "branch": b, "step": i, "state": "{}",
                 "lsn": i, "created_at": at}
                for b, i in ((1, 1), (2, 2), (2, 3))
            ],
        )  # fmt: skip
        conn.execute(
            insert(outbox), _outbox(100 + n, row_status, 2 * HOUR, branch=f"t/{run_id}/b2")
        )


def _seed_sagas_pools_releases(conn: Any) -> None:
    long_ago, inside = NOW - 11 * HOUR, NOW - 9 * HOUR
    sagas = [  # 2 purgeable: finished past the 10 h horizon
        (SagaState.COMPLETED, long_ago), (SagaState.ABORTED, long_ago),
        (SagaState.COMPLETED, inside), (SagaState.HUMAN, long_ago),
        (SagaState.RUNNING, long_ago), (SagaState.COMPENSATING, long_ago),
        (SagaState.AWAITING_APPROVAL, long_ago),
    ]  # fmt: skip
    conn.execute(
        insert(saga),
        [
            {"saga_id": f"s{i}", "definition": "d", "state": state.value, "step": 0,
             "phase": "action", "attempt": 1, "payload": "{}", "results": "{}",
             "compensations": 0, "deadline_ms": None, "error": None, "history": "[]",
             "created_at_ms": long_ago, "updated_at_ms": at, "version": 1}
            for i, (state, at) in enumerate(sagas)
        ],
    )  # fmt: skip
    conn.execute(
        insert(effects_table),
        [
            {"scope": "g", "event_id": f"e{i}", "partition": 0, "offset": i, "key": None,
             "member": "m", "started_ms": NOW - 3 * HOUR, "ended_ms": NOW - ended,
             "reused": False, "result": "{}"}
            for i, ended in enumerate((2 * HOUR, 2 * HOUR, HOUR // 2))
        ],
    )  # fmt: skip
    beat = 2_000
    members = [  # (member, beat age, period): 1 purgeable
        ("gone", 2 * HOUR, beat),  # stopped beating 2 h ago
        ("slow", 2 * HOUR, HOUR),  # 2 h without a beat, but its period is 1 h: not 3 missed
        ("recent", HOUR // 2, beat),  # stale, but not for an hour yet
        ("alive", 100, beat),
    ]
    conn.execute(
        insert(members_table),
        [
            {"pool": "p", "member": m, "running": 0, "oldest_started_ms": None,
             "beat_ms": NOW - age, "period_ms": period}
            for m, age, period in members
        ],
    )  # fmt: skip
    releases = [  # (state, completed ago): 2 purgeable
        (quarantine_model.DONE, 2 * HOUR), (quarantine_model.FAILED, 2 * HOUR),
        (quarantine_model.DONE, HOUR // 2), (quarantine_model.PENDING, None),
    ]  # fmt: skip
    conn.execute(
        insert(release_table),
        [
            {"grp": "g", "topic": "x", "key": f"k{i}", "state": state,
             "requested_ms": NOW - 100 * HOUR,
             "completed_ms": None if ago is None else NOW - ago, "note": ""}
            for i, (state, ago) in enumerate(releases)
        ],
    )  # fmt: skip
    conn.execute(
        insert(requests.spawn_requests_table),
        [
            {"msg_id": f"q{i}", "spawn_id": f"w{i}", "requester": "m", "host": "B",
             "profile": "p", "parent": None, "job": None, "trace_id": "t",
             "sent_ms": NOW - 100 * HOUR, "deadline_ms": NOW - 2 * HOUR, "state": state}
            for i, state in enumerate((requests.SPAWNED, "failed", requests.PENDING))
        ],
    )  # fmt: skip


PURGEABLE = {
    StoreTable.OUTBOX: 11,  # 8 + the 3 sent rows of the runs
    StoreTable.HELD: 5,
    StoreTable.TRACKING: 3,
    StoreTable.INJECT_JOURNAL: 2,
    StoreTable.TURNS: 2,
    StoreTable.DEDUPE: 6,
    StoreTable.FAILED_REPORTED: 1,
    StoreTable.WAITERS: 1,
    StoreTable.IDEMPOTENCY: 1,
    StoreTable.SPAWNS: 3,
    StoreTable.STOPS: 2,
    StoreTable.STOP_REQUESTS: 2,
    StoreTable.SPAWN_REQUESTS: 2,
    StoreTable.RUN_STEPS: 3,
    StoreTable.RUN_BRANCHES: 2,
    StoreTable.RUNS: 1,
    StoreTable.RELEASE_REQUESTS: 2,
    StoreTable.SAGAS: 2,
    StoreTable.POOL_EFFECTS: 2,
    StoreTable.POOL_MEMBERS: 1,
}
LEFT = {
    StoreTable.OUTBOX: 5,  # 4 + the stuck run's FAILED row
    StoreTable.HELD: 5,
    StoreTable.TRACKING: 2,
    StoreTable.INJECT_JOURNAL: 2,
    StoreTable.TURNS: 1,
    StoreTable.DEDUPE: 2,
    StoreTable.FAILED_REPORTED: 1,
    StoreTable.WAITERS: 1,
    StoreTable.IDEMPOTENCY: 2,
    StoreTable.SPAWNS: 4,
    StoreTable.STOPS: 2,
    StoreTable.STOP_REQUESTS: 1,
    StoreTable.SPAWN_REQUESTS: 1,
    StoreTable.RUN_STEPS: 9,
    StoreTable.RUN_BRANCHES: 6,
    StoreTable.RUNS: 3,
    StoreTable.RELEASE_REQUESTS: 2,
    StoreTable.SAGAS: 5,
    StoreTable.POOL_EFFECTS: 1,
    StoreTable.POOL_MEMBERS: 3,
}


def _rows(engine: Engine, table: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(table)))


def _count(engine: Engine, table: Any, *where: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())


def test_purge_deletes_exactly_the_finished_rows_past_retention(engine: Engine) -> None:
    """R-STORE-1: dedupe rows go only past the horizon; unsent and undrained rows never go."""
    _seed(engine)
    registry = CollectorRegistry()
    purger = Purger(
        engine=engine,
        policy=POLICY,
        metrics=RetentionMetrics(registry),
        rules=RULES,
        clock=lambda: NOW_S,
    )
    dry = purger.run(dry_run=True)
    # a run's branches and row wait for its steps: a dry run counts them once the steps are gone
    assert dry.rows == PURGEABLE | {StoreTable.RUN_BRANCHES: 0, StoreTable.RUNS: 0}
    assert purger.row_counts() == {t: PURGEABLE[t] + LEFT[t] for t in StoreTable}, "dry run"

    report = purger.run()
    assert report.rows == PURGEABLE
    assert purger.row_counts() == LEFT
    c = outbox.c
    assert _count(engine, outbox, c.status == int(RowStatus.PENDING)) == 2
    assert _count(engine, outbox, c.status == int(RowStatus.FAILED)) == 2
    assert _count(engine, held_table, held_table.c.drained_at_ms.is_(None)) == 4
    assert _count(engine, tracking.forward_table, tracking.forward_table.c.state == "pending") == 1
    left = {r.state for r in _rows(engine, spawns.spawns_table)}
    assert left == {spawns.REAPED, spawns.LIVE, spawns.LAUNCHING, spawns.STOPPING}
    assert {r.state for r in _rows(engine, stops.stops_table)} == {stops.DONE, stops.STOPPING}
    assert {r.run_id for r in _rows(engine, run)} == {"live", "fresh", "stuck"}
    assert {r.run_id for r in _rows(engine, run_step)} == {"live", "fresh", "stuck"}
    assert {r.saga_id for r in _rows(engine, saga)} == {"s2", "s3", "s4", "s5", "s6"}
    assert {r.member for r in _rows(engine, members_table)} == {"slow", "recent", "alive"}
    left_releases = {r.state for r in _rows(engine, release_table)}
    assert left_releases == {quarantine_model.DONE, quarantine_model.PENDING}
    for table, n in PURGEABLE.items():
        assert registry.get_sample_value("fleet_store_rows_purged_total", {"table": table}) == n
        assert registry.get_sample_value("fleet_store_rows", {"table": table}) == LEFT[table]
    assert purger.run().total == 0, "a second pass finds nothing"


def test_a_pass_is_bounded_to_max_batches_of_batch_rows(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(dedupe_table),
            [{"scope": "g", "msg_id": f"d{i}", "seen_at_ms": NOW - 11 * HOUR} for i in range(11)],
        )
    small = RetentionConfig(**{**_fields(POLICY), "batch_rows": 2, "max_batches": 2})
    purger = Purger(engine=engine, policy=small, rules=RULES, clock=lambda: NOW_S, pause_s=0)
    stopped = threading.Event()
    stopped.set()
    assert purger.run(stop=stopped).total == 0, "a stopping gateway purges nothing more"
    passes = [purger.run().rows[StoreTable.DEDUPE] for _ in range(4)]
    assert passes == [4, 4, 3, 0]
    assert _count(engine, dedupe_table) == 0


def test_stats_report_rows_oldest_age_and_size(engine: Engine) -> None:
    _seed(engine)
    stats = store_stats(engine, RULES, now=NOW_S)
    by_name = {t.table: t for t in stats.tables}
    assert by_name["outbox"].rows == 16  # 12 + one per run
    assert by_name["outbox"].oldest_age_s == pytest.approx(100 * 3600)
    assert by_name["fleet_dedupe"].oldest_age_s == pytest.approx(11 * 3600)
    assert by_name["fleet_roster_cache"].rows == 0
    assert by_name["fleet_roster_cache"].oldest_age_s is None
    assert by_name["run_branch"].rows == 8 and by_name["run_branch"].oldest_age_s is None
    assert by_name["fleet_saga"].oldest_age_s == pytest.approx(11 * 3600)
    assert stats.db_bytes > 0 and stats.used_bytes <= stats.db_bytes
    assert stats.to_dict()["tables"][0]["table"] == stats.tables[0].table


def _fields(policy: RetentionConfig) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(policy)


def test_fleet_store_purge_and_stats_cli(engine: Engine, store_url: str) -> None:
    """``fleet store purge --dry-run`` counts, ``purge`` deletes (default policy: dedupe rows
    older than 8 days), ``stats --json`` shows what is left."""
    import json
    import time

    from typer.testing import CliRunner

    from pipeline.cli.main import app

    now = int(time.time() * 1000)
    with engine.begin() as conn:
        conn.execute(
            insert(dedupe_table),
            [
                {
                    "scope": "g",
                    "msg_id": f"d{i}",
                    "seen_at_ms": now - (9 if i < 3 else 7) * 86_400_000,
                }
                for i in range(5)
            ],
        )
    runner = CliRunner()
    dry = runner.invoke(app, ["store", "purge", "--store-url", store_url, "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["rows"]["fleet_dedupe"] == 3
    assert _count(engine, dedupe_table) == 5
    done = runner.invoke(app, ["store", "purge", "--store-url", store_url, "--json"])
    assert json.loads(done.stdout) | {"rows": None} == {"dry_run": False, "rows": None, "total": 3}
    stats = json.loads(
        runner.invoke(app, ["store", "stats", "--store-url", store_url, "--json"]).stdout
    )
    dedupe = next(t for t in stats["tables"] if t["table"] == "fleet_dedupe")
    assert dedupe["rows"] == 2
    assert 7 * 86400 - 60 < dedupe["oldest_age_s"] < 7 * 86400 + 60


def test_a_run_goes_steps_first_and_a_bounded_pass_leaves_no_orphan(engine: Engine) -> None:
    """One batch per table per pass: the steps go over two passes, the branches and the run only
    once no step is left, so a pass cut short never strands a step without its run."""
    old = (NOW - 2 * HOUR) / 1000.0
    with engine.begin() as conn:
        conn.execute(
            insert(run),
            {"tenant": "t", "run_id": "r", "live_branch": 1, "status": "completed",
             "created_at": old, "updated_at": old},
        )  # fmt: skip
        conn.execute(
            insert(run_branch),
            {"tenant": "t", "run_id": "r", "branch": 1, "branch_key": "t/r/b1", "parent": None,
             "fork_step": 0, "live": True},
        )  # fmt: skip
        conn.execute(
            insert(run_step),
            [
                {"tenant": "t", "run_id": "r", "branch": 1, "step": i, "state": "{}", "lsn": i,
                 "created_at": old}
                for i in (1, 2, 3)
            ],
        )  # fmt: skip
    one = RetentionConfig(**{**_fields(POLICY), "batch_rows": 2, "max_batches": 1})
    purger = Purger(engine=engine, policy=one, rules=RULES, clock=lambda: NOW_S, pause_s=0)
    tables = (StoreTable.RUN_STEPS, StoreTable.RUN_BRANCHES, StoreTable.RUNS)
    reports = [purger.run().rows for _ in range(3)]
    assert [tuple(rows[t] for t in tables) for rows in reports] == [(2, 0, 0), (1, 1, 1), (0, 0, 0)]


def test_a_process_purges_only_the_tables_it_writes(engine: Engine) -> None:
    """A relay (or a pool member, a reporter) beside a gateway on one store must not apply its
    own retention to the gateway's rows: its purger knows only its own tables."""
    from pipeline.retention.rules import POOL_MEMBER_TABLES, RELAY_TABLES

    _seed(engine)
    registry = CollectorRegistry()
    relay = purger_for(engine, POLICY, RELAY_TABLES, registry=registry)
    relay.clock = lambda: NOW_S
    assert relay.run().rows == {StoreTable.OUTBOX: PURGEABLE[StoreTable.OUTBOX]}
    assert registry.get_sample_value("fleet_store_rows", {"table": "fleet_held"}) is None
    member = purger_for(engine, POLICY, POOL_MEMBER_TABLES)
    member.clock = lambda: NOW_S
    assert member.run().rows == {t: PURGEABLE[t] for t in POOL_MEMBER_TABLES}
    everything = Purger(engine=engine, policy=POLICY, rules=RULES, clock=lambda: NOW_S).run().rows
    done = {StoreTable.OUTBOX, *POOL_MEMBER_TABLES}
    assert everything == {t: 0 if t in done else PURGEABLE[t] for t in StoreTable}
