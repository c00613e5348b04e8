"""Pool step keys through ``pipeline.effects`` (issues 10 and 11): SQLite (WAL) and PostgreSQL.

The code production runs (``StepClaims``, ``Heartbeat``, ``IdempotencyStore``) against a real
store: a stored outcome is replayed; a key held by a live member (its heartbeat renewing the
lease) is waited for, never taken over, however long the step runs; a holder that stops renewing
(killed) is taken over once its lease ends, by exactly one of two racing members; a holder whose
lease was taken over cannot overwrite the new holder's outcome.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.effects import Done, FirstUse, IdempotencyStore, KeyClass, KeyState
from pipeline.pool.claims import StepClaims
from pipeline.pool.handler import PoolHandler
from pipeline.pool.heartbeat import Heartbeat, member_lanes
from pipeline.pool.metrics import PoolMetrics
from pipeline.record import Record
from pipeline.runtime.dedupe import claim_ids
from pipeline.store import make_engine, session_factory

LEASE_S = 0.6
KC = "pool.t"


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    eng = make_engine(store_url)
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    return session_factory(engine)


def _claims(sessions: sessionmaker[Session], lease_s: float = LEASE_S) -> StepClaims:
    kc = KeyClass(name=KC, retention_s=None, replay_window_s=None, lease_s=lease_s)
    # the engine, as bootstrap.build_pool_member passes it: plain connections per transaction
    return StepClaims(IdempotencyStore([kc]), sessions.kw["bind"], key_class=KC, poll_s=0.05)


def _started_5_s_ago() -> list[int]:
    """One running step, 5 s old when this returns; the list is read a moment after the call
    (a step's start recorded while the beat runs): a beat that read its clock before the list
    aged it 4.999 s (flaky in CI), so this one takes 2 ms to answer."""
    time.sleep(0.002)
    return [int(time.time() * 1000) - 5000]


def _beat(
    sessions: sessionmaker[Session], claims: StepClaims, member: str, lease_s: float = LEASE_S
) -> Heartbeat:
    return Heartbeat(
        claims=claims,
        sessions=sessions,
        pool="t",
        member=member,
        running=_started_5_s_ago,
        period_s=lease_s / 3,
    )


def test_a_completed_step_is_replayed_not_run(sessions: sessionmaker[Session]) -> None:
    a, b = _claims(sessions), _claims(sessions)
    assert isinstance(a.claim("e1", b"v"), FirstUse)
    assert a.complete("e1", '{"answer": 42}', b"v") == '{"answer": 42}'
    again = b.claim("e1", b"v")
    assert isinstance(again, Done) and again.value == '{"answer": 42}'
    assert a.held() == [] and b.held() == []


def test_a_live_holder_keeps_its_step_past_the_lease_and_the_waiter_replays_it(
    sessions: sessionmaker[Session],
) -> None:
    """The step runs 3 leases long; the heartbeat renews it (a third of the lease), so the second
    member waits (no takeover, no second run) and then replays the stored outcome."""
    lease = 2.0  # a beat may be late by up to two periods on a loaded machine
    a, b = _claims(sessions, lease), _claims(sessions, lease)
    beat = _beat(sessions, a, "a", lease)
    assert isinstance(a.claim("e2", b"v"), FirstUse)
    beat.start()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(b.claim("e2", b"v")))
    waiter.start()
    time.sleep(3 * lease)
    assert waiter.is_alive(), f"the waiter did not wait: {got}"
    assert a.complete("e2", "done-by-a", b"v") == "done-by-a"
    waiter.join(timeout=10)
    beat.close()
    assert len(got) == 1 and isinstance(got[0], Done) and got[0].value == "done-by-a"


def test_a_dead_holder_is_taken_over_by_exactly_one_member_after_its_lease(
    sessions: sessionmaker[Session],
) -> None:
    dead = _claims(sessions)
    first = dead.claim("e3", b"v")
    assert isinstance(first, FirstUse) and first.attempt == 1
    racers = [_claims(sessions) for _ in range(3)]
    answers: list[object] = []
    lock = threading.Lock()

    def race(c: StepClaims) -> None:
        r = c.claim("e3", b"v")
        with lock:
            answers.append(r)
        if isinstance(r, FirstUse):
            c.complete("e3", "ran-once", b"v")

    threads = [threading.Thread(target=race, args=(c,)) for c in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    takers = [r for r in answers if isinstance(r, FirstUse)]
    assert len(takers) == 1 and takers[0].restarted and takers[0].attempt == 2, answers
    assert sum(isinstance(r, Done) and r.value == "ran-once" for r in answers) == 2, answers
    # the dead holder wakes up late: it may not overwrite, it replays the winner's outcome
    assert dead.complete("e3", "late", b"v") == "ran-once"
    with sessions() as s:
        rec = dead.store.get(s, "e3", key_class=KC)
    assert (
        rec is not None and rec.state is KeyState.SUCCEEDED and rec.result == {"value": "ran-once"}
    )


def test_a_failed_step_releases_its_key_for_the_runtime_retry(
    sessions: sessionmaker[Session],
) -> None:
    a = _claims(sessions)
    assert isinstance(a.claim("e4", b"v"), FirstUse)
    a.release("e4")
    assert isinstance(a.claim("e4", b"v"), FirstUse)


def test_the_heartbeat_publishes_the_members_lanes_and_a_stop_removes_them(
    sessions: sessionmaker[Session],
) -> None:
    a = _claims(sessions)
    beat = _beat(sessions, a, "m-a")
    registry = CollectorRegistry()
    beat.metrics = PoolMetrics(registry, pool="t")
    beat.beat()
    with sessions() as s:
        (row,) = member_lanes(s, "t")
    assert row.member == "m-a" and row.running == 1 and not row.stale
    assert row.oldest_running_s is not None and row.oldest_running_s >= 5
    assert (registry.get_sample_value("fleet_pool_oldest_step_seconds", {"pool": "t"}) or 0) >= 5
    with sessions() as s:
        (late,) = member_lanes(s, "t", now_ms=int(time.time() * 1000) + 10_000)
    assert late.stale  # no beat for three periods: its member died without a goodbye
    beat.close()
    with sessions() as s:
        assert member_lanes(s, "t") == []


def test_a_stopping_member_keeps_renewing_a_given_up_step_until_it_ends(
    sessions: sessionmaker[Session],
) -> None:
    """A step given up at a stop still runs on its thread: the heartbeat keeps its lease (no
    other member may take it over) until the step stores its outcome, then stops."""
    lease = 2.0  # a beat may be late by up to two periods on a loaded machine
    a, b = _claims(sessions, lease), _claims(sessions, lease)
    beat = _beat(sessions, a, "a", lease)
    assert isinstance(a.claim("e5", b"v"), FirstUse)
    beat.start()
    closer = threading.Thread(target=beat.close)
    closer.start()
    time.sleep(2 * lease)
    assert closer.is_alive(), "the heartbeat stopped while its member still held a step"
    with sessions.begin() as s:
        still = b.store.reserve(s, "e5", b"v", key_class=KC)
    assert not isinstance(still, FirstUse), "a held step was taken over during the stop"
    a.complete("e5", "finished-late", b"v")
    closer.join(timeout=10)
    assert not closer.is_alive()
    again = b.claim("e5", b"v")
    assert isinstance(again, Done) and again.value == "finished-late"


def test_a_holder_that_missed_its_lease_counts_it_lost_and_replays_the_new_outcome(
    sessions: sessionmaker[Session],
) -> None:
    """A member that could not beat for a whole lease (here: no heartbeat at all) is presumed
    dead: another member takes the key over; the old holder's next beat finds it lost
    (``fleet_pool_step_leases_lost_total``) and its late result does not overwrite."""
    a, b = _claims(sessions), _claims(sessions)
    assert isinstance(a.claim("e6", b"v"), FirstUse)
    time.sleep(LEASE_S + 0.2)
    taken = b.claim("e6", b"v")
    assert isinstance(taken, FirstUse) and taken.attempt == 2
    registry = CollectorRegistry()
    beat = _beat(sessions, a, "m-a")
    beat.metrics = PoolMetrics(registry, pool="t")
    beat.beat()
    lost = registry.get_sample_value("fleet_pool_step_leases_lost_total", {"pool": "t"})
    assert lost == 1
    assert b.complete("e6", "by-b", b"v") == "by-b"
    assert a.complete("e6", "by-a-late", b"v") == "by-b"


def test_a_step_that_completes_while_the_beat_renews_is_not_a_lost_lease(
    sessions: sessionmaker[Session],
) -> None:
    """The heartbeat lists the held keys, then renews them; a step that stored its result in
    between is done, not taken over: no "lease was lost" and no count (a busy pool's members
    counted hundreds of such false losses)."""
    a = _claims(sessions)
    assert isinstance(a.claim("e7", b"v"), FirstUse)
    listed = a.held()

    class Racing:  # the step completes right after held() listed its key
        def __getattr__(self, name: str) -> object:
            return getattr(a, name)

        def held(self) -> list[object]:
            a.complete("e7", "done", b"v")
            return list(listed)

    registry = CollectorRegistry()
    beat = _beat(sessions, a, "m-a")
    beat.claims = Racing()  # type: ignore[assignment]
    beat.metrics = PoolMetrics(registry, pool="t")
    beat.beat()
    lost = registry.get_sample_value("fleet_pool_step_leases_lost_total", {"pool": "t"})
    assert not lost


def test_an_applied_event_is_never_claimed_and_its_step_never_runs(
    sessions: sessionmaker[Session],
) -> None:
    """R-POOL-4, "dedupe before the model call": the handler asks for the dedupe row inside the
    claim's own transaction (one write transaction, not a read and a write); an applied event
    reserves no step key and runs no step, and the runtime drops it as a duplicate."""
    ran: list[Record] = []
    handler = PoolHandler(ran.append, scope="g", member="m", claims=_claims(sessions))

    def record(msg_id: str) -> Record:
        return Record("t", 0, 0, b"k", b"v", (("msgId", msg_id.encode()),), 0)

    with sessions.begin() as session:
        claim_ids(session.connection(), "g", ["applied"], 0)
    handler.run(record("applied"))
    handler.run(record("fresh"))
    assert [r.header_str("msgId") for r in ran] == ["fresh"]
    with sessions() as session:
        store = handler.claims.store if handler.claims else None
        assert store is not None
        assert store.get(session, "applied", key_class=KC) is None  # never reserved
        fresh = store.get(session, "fresh", key_class=KC)
        assert fresh is not None and fresh.state is KeyState.SUCCEEDED
