"""The inject journal (R-ACK-4; found by the ``commit-inject`` chaos scenario).

R-ACK-3: the forward path is at-most-once -- commit before inject, then ``INJECTED``; no
``INJECTED`` in time is one loud ``FAILED`` at the sender. An inject into a terminal cannot share
a transaction with its receipt, so the journal brackets it: a row committed before the inject,
closed in the receipt's own transaction right after. These tests hold its rules on real SQLite
and PostgreSQL stores: a receipt is never more than one transaction behind its inject; a row left open by a crash
becomes, at the next start, exactly one ``INJECTED`` with stage ``uncertain`` (never a false "not
injected", never both); the sender records that as ``uncertain``, apart from ``INJECT_TIMEOUT``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, select

from pipeline.bootstrap.retention import rules_for
from pipeline.envelope import Envelope, Kind, Signer
from pipeline.envelope.receipts import Receipt, read_receipt
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.injection import InjectionQueue
from pipeline.gateway.injectors import CallbackInjector
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.gateway.render import describe
from pipeline.hooks import Hooks, Window
from pipeline.host import deadlines
from pipeline.host import inject_journal as journal
from pipeline.host.outbound import Publisher
from pipeline.host.tracking import FORWARD
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.notify import woken_in_process
from pipeline.outbox.tables import outbox
from pipeline.presence.model import Delivery, Role
from pipeline.record_headers import unpack_headers
from pipeline.retention.policy import RetentionConfig
from pipeline.retention.rules import StoreTable
from pipeline.store import make_engine, session_factory


class Crash(BaseException):
    """Stands for kill -9 at a crash point: nothing after it runs (not an ``Exception``, so the
    worker's guard does not catch it)."""


def _queue(
    engine: Engine, injected: list[str], *, hooks: Hooks | None = None
) -> tuple[InjectionQueue, GatewayMetrics]:
    return queue_into(
        engine,
        lambda **kw: injected.append(kw["msg_id"]),
        **({"hooks": hooks} if hooks is not None else {}),
    )


def queue_into(engine: Engine, inject: Any, **kw: Any) -> tuple[InjectionQueue, GatewayMetrics]:
    """Gateway B's inject queue for worker-b, whose injector calls ``inject``; ``kw``: the
    queue's other settings."""
    entities = LocalEntities()
    entities.register(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=CallbackInjector(inject),
    )
    metrics = GatewayMetrics(CollectorRegistry())
    q = InjectionQueue(
        entities=entities,
        sessions=session_factory(engine),
        publisher=Publisher(host="B", signer=Signer.generate("B"), topics=TopicNames()),
        metrics=metrics,
        **kw,
    )
    return q, metrics


def _brief(**kw: Any) -> Envelope:
    return Envelope.new(kind=Kind.SEND, sender="main-a", to="worker-b", ttl_s=60, **kw)


def _receipts(engine: Engine) -> list[tuple[str, Receipt]]:
    """(kind, receipt) of every receipt staged in the outbox, in order."""
    out = []
    with engine.connect() as c:
        for r in c.execute(select(outbox.c.headers, outbox.c.value).order_by(outbox.c.id)):
            headers = dict(unpack_headers(bytes(r.headers)))
            kind = bytes(headers["kind"]).decode()
            out.append((kind, read_receipt(kind, bytes(r.value))))
    return out


def _states(engine: Engine) -> dict[str, str]:
    with engine.connect() as c:
        t = journal.journal_table
        return {r.msg_id: r.state for r in c.execute(select(t.c.msg_id, t.c.state))}


def _wait(q: InjectionQueue) -> None:
    for _ in range(400):
        if q.idle():
            return
        threading.Event().wait(0.01)
    raise AssertionError("injection queue never went idle")


@pytest.fixture
def engine(store_url: str) -> Engine:
    """Gateway B's store: SQLite and real PostgreSQL (the journal's transactions differ), its
    writes waking the relay in process, as in the gateway (``bootstrap/gateway.py``)."""
    e = make_engine(store_url)
    woken_in_process(e)
    yield e  # type: ignore[misc]
    e.dispose()


def test_each_inject_closes_its_row_and_stages_its_injected_at_once(engine: Engine) -> None:
    injected: list[str] = []
    q, _ = _queue(engine, injected)
    briefs = [_brief() for _ in range(3)]
    for b in briefs:
        q.submit("worker-b", b, reply_host="A")
    _wait(q)
    q.stop()
    assert injected == [b.msg_id for b in briefs]
    assert _states(engine) == {b.msg_id: journal.INJECTED for b in briefs}
    got = _receipts(engine)
    assert [(k, r.msg_id, r.stage) for k, r in got] == [("INJECTED", b.msg_id, "") for b in briefs]


def _held_burst(engine: Engine, burst: int, n: int) -> tuple[list[Envelope], list[Any], int]:
    """``n`` briefs queued behind a first inject held until all are queued; returns the briefs,
    (msgId, open rows) as each inject saw them, and how many bursts opened rows on their own."""
    seen: list[tuple[str, set[str]]] = []
    gate = threading.Event()

    def look(**kw: Any) -> None:
        gate.wait(5)  # hold the first inject until the whole backlog is queued
        with engine.connect() as c:
            t = journal.journal_table
            rows = c.execute(select(t.c.msg_id).where(t.c.state == journal.OPEN))
            seen.append((kw["msg_id"], {r.msg_id for r in rows}))

    entities = LocalEntities()
    entities.register(
        gid="worker-b", role=Role.WORKER, delivery=Delivery.INJECT, injector=CallbackInjector(look)
    )
    q = InjectionQueue(
        entities=entities,
        sessions=session_factory(engine),
        publisher=Publisher(host="B", signer=Signer.generate("B"), topics=TopicNames()),
        metrics=GatewayMetrics(CollectorRegistry()),
        burst=burst,
    )
    alone: list[int] = []  # bursts whose rows opened in a transaction of their own
    own = q._open_all

    def open_all(jobs: list[Any]) -> set[str]:
        if any(j is not None for j in jobs):  # the stop mark alone opens nothing
            alone.append(len(jobs))
        return own(jobs)

    q._open_all = open_all  # type: ignore[method-assign]
    briefs = [_brief() for _ in range(n)]
    for b in briefs:
        q.submit("worker-b", b, reply_host="A")
    gate.set()
    _wait(q)
    q.stop()
    assert [m for m, _ in seen] == [b.msg_id for b in briefs], "injected once each, in order"
    assert _states(engine) == {b.msg_id: journal.INJECTED for b in briefs}
    assert [r.msg_id for _, r in _receipts(engine)] == [b.msg_id for b in briefs]
    return briefs, seen, len(alone)


def test_with_burst_one_each_inject_sees_exactly_its_own_row_open(engine: Engine) -> None:
    """``burst = 1``: the next brief's row opens in the transaction that closes the last one, and
    the window is one inject: whenever the injector runs, the one open row is its own brief's."""
    briefs, seen, alone = _held_burst(engine, burst=1, n=6)
    assert seen == [(b.msg_id, {b.msg_id}) for b in briefs]
    assert alone == 1, "the rest opened in the previous close's transaction"


def test_a_burst_keeps_at_most_burst_rows_open_each_its_own_burst(engine: Engine) -> None:
    """A backlog is journaled a burst at a time: whenever the injector runs, its own row is open
    and so are at most ``burst`` rows, all of briefs of its burst (never an earlier brief's: a
    burst's rows close, with their receipts, before the next burst injects anything)."""
    briefs, seen, alone = _held_burst(engine, burst=4, n=11)
    order = {b.msg_id: i for i, b in enumerate(briefs)}
    for msg_id, open_rows in seen:
        assert msg_id in open_rows
        assert len(open_rows) <= 4
        assert min(order[m] for m in open_rows) >= order[msg_id] - 3
        assert all(order[m] - order[msg_id] < 4 for m in open_rows)
    bursts = {frozenset(rows) for _, rows in seen}
    assert sorted(order[m] for rows in bursts for m in rows) == list(range(11)), "disjoint bursts"
    assert alone == 1, "after the first, each burst opened in the previous close's transaction"


def test_an_untracked_inject_writes_no_journal_row(engine: Engine) -> None:
    """A broadcast (no reply host) gets no receipt, so it needs no journal: no cost added."""
    injected: list[str] = []
    q, _ = _queue(engine, injected)
    b = _brief()
    q.submit("worker-b", b, reply_host=None)
    _wait(q)
    q.stop()
    assert injected == [b.msg_id] and _states(engine) == {} and _receipts(engine) == []


def test_a_crash_after_the_inject_leaves_the_row_open_and_the_restart_reports_it_uncertain(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """kill -9 between the inject and its receipt's transaction (``Window.INJECTED_NOT_RECORDED``):
    no receipt yet, the row open. The next start reports it once, as INJECTED stage uncertain;
    a second report finds nothing (exactly once)."""
    injected: list[str] = []

    def die(window: str) -> None:
        if window == Window.INJECTED_NOT_RECORDED:
            raise Crash

    crashing, _ = _queue(engine, injected, hooks=Hooks(crash=die))
    b = _brief()
    with pytest.raises(Crash):
        _one(crashing, _job(b))
    assert injected == [b.msg_id], "the inject ran"
    assert _states(engine) == {b.msg_id: journal.OPEN} and _receipts(engine) == []

    restarted, metrics = _queue(engine, [])
    with caplog.at_level(logging.WARNING):
        assert restarted.report_uncertain() == 1
    assert restarted.report_uncertain() == 0, "reported once"
    assert _states(engine) == {b.msg_id: journal.UNCERTAIN}
    [(kind, r)] = _receipts(engine)
    assert (kind, r.msg_id, r.recipient, r.stage) == ("INJECTED", b.msg_id, "worker-b", "uncertain")
    assert "UNCERTAIN INJECT" in caplog.text and b.msg_id in caplog.text
    assert metrics.inject_uncertain.labels("restart")._value.get() == 1


def _job(env: Envelope) -> Any:
    from pipeline.gateway.injection import _Job

    return _Job("worker-b", env, "A", 0.0)


def _opened_inject(q: InjectionQueue, job: Any) -> Any:
    """The worker's steps for a burst of one: its row committed, then the inject."""
    opened = q._open_all([job])
    return q._inject(job, opened=job.envelope.msg_id in opened)


def _one(q: InjectionQueue, job: Any) -> None:
    """... and the close with its receipt."""
    q._record([(job, _opened_inject(q, job))], [])


def test_a_close_commits_with_its_receipts_or_not_at_all(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-ACK-4: a journal row closes in the transaction that stages its receipt, both or
    neither. On PostgreSQL the receipts' rows carry that transaction's ``COMMIT`` (one round
    trip fewer per burst) unless the next burst's rows open after them in it; then a refused
    receipt (its branch abandoned: ``BRANCH_ABANDONED``) must fail the statement, so the close
    does not commit without it: the row stays open, reported uncertain at the next start."""
    from pipeline.outbox.writer import abandon_branch
    from pipeline.store import pg_pipeline

    carried: list[object] = []
    real_rows = pg_pipeline.all_rows
    monkeypatch.setattr(
        pg_pipeline, "all_rows", lambda *a, **k: carried.append(k.get("then")) or real_rows(*a, **k)
    )
    on_pg = engine.dialect.name == "postgresql"
    q, _ = _queue(engine, [])
    first, second, third = _brief(), _brief(), _brief()
    j1, j2 = _job(first), _job(second)
    opened = q._open_all([j1])
    q._record([(j1, q._inject(j1, opened=True))], [j2])  # the next burst opens in this close
    assert carried.count(("COMMIT", ())) == 0
    q._record([(j2, q._inject(j2, opened=True))], [])
    assert carried.count(("COMMIT", ())) == (1 if on_pg else 0)
    assert opened == {first.msg_id}
    assert _states(engine) == {first.msg_id: journal.INJECTED, second.msg_id: journal.INJECTED}
    with session_factory(engine).begin() as s:
        abandon_branch(s, branch_key="B>main-a@A")  # the receipts' branch to main-a on A
    j3 = _job(third)
    outcome = q._inject(j3, opened=third.msg_id in q._open_all([j3]))
    with pytest.raises(Exception, match="abandoned"):
        q._record([(j3, outcome)], [])
    assert _states(engine)[third.msg_id] == journal.OPEN, "no close without its receipt"
    assert [r.msg_id for _, r in _receipts(engine)] == [first.msg_id, second.msg_id]
    q.stop()


def test_the_row_is_committed_before_the_inject_runs(engine: Engine) -> None:
    """The inject sees its own journal row already committed (a fresh connection reads it):
    a crash anywhere during the inject is reported uncertain, never as not injected."""
    seen: list[str | None] = []

    def look(**kw: Any) -> None:
        with session_factory(engine)() as s:
            seen.append(journal.state_of(s, kw["msg_id"]))

    entities = LocalEntities()
    entities.register(
        gid="worker-b", role=Role.WORKER, delivery=Delivery.INJECT, injector=CallbackInjector(look)
    )
    q = InjectionQueue(
        entities=entities,
        sessions=session_factory(engine),
        publisher=Publisher(host="B", signer=Signer.generate("B"), topics=TopicNames()),
        metrics=GatewayMetrics(CollectorRegistry()),
    )
    b = _brief()
    _one(q, _job(b))
    assert seen == [journal.OPEN]
    assert _states(engine) == {b.msg_id: journal.INJECTED}


def test_whoever_closes_the_row_first_sends_the_one_outcome(engine: Engine) -> None:
    """A restart's report (a twin's) and the injecting worker race on one open row: the
    conditional close lets exactly one of them stage its receipt."""
    injected: list[str] = []
    q, _ = _queue(engine, injected)
    b = _brief()
    outcome = _opened_inject(q, _job(b))  # injected; the row is open
    assert q.report_uncertain() == 1  # the other process got there first
    q._record([(_job(b), outcome)], [])  # the worker's close finds the row not open
    assert [(k, r.stage) for k, r in _receipts(engine)] == [("INJECTED", "uncertain")]
    assert _states(engine) == {b.msg_id: journal.UNCERTAIN}


def test_a_burst_whose_row_was_moved_first_closes_the_others_with_their_receipts(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """R-ACK-4 with a burst: a twin's report moved one row of three first. On PostgreSQL the
    close rides with the receipts, sure every row is still open; the statement fails, nothing
    of that transaction commits, and the close runs again the waiting way: the other two close
    ``injected`` with their receipts, the moved one keeps its outcome and gets none from the
    worker. SQLite closes the waiting way at once; the outcome is the same."""
    injected: list[str] = []
    q, _ = _queue(engine, injected)
    briefs = [_brief() for _ in range(3)]
    jobs = [_job(b) for b in briefs]
    opened = q._open_all(jobs)
    done = [(j, q._inject(j, opened=j.envelope.msg_id in opened)) for j in jobs]
    with session_factory(engine).begin() as s:  # the twin's report, on the middle row only
        assert journal.close_entry(s, briefs[1].msg_id, journal.UNCERTAIN)
    with caplog.at_level(logging.WARNING, logger="pipeline.gateway.injection"):
        q._record(done, [])
    assert injected == [b.msg_id for b in briefs]
    assert _states(engine) == {
        briefs[0].msg_id: journal.INJECTED,
        briefs[1].msg_id: journal.UNCERTAIN,
        briefs[2].msg_id: journal.INJECTED,
    }
    assert [(k, r.msg_id) for k, r in _receipts(engine)] == [
        ("INJECTED", briefs[0].msg_id),
        ("INJECTED", briefs[2].msg_id),
    ]
    assert [r.getMessage() for r in caplog.records if "not open any more" in r.getMessage()] == [
        f"journal row of {briefs[1].msg_id} was not open any more"
    ]


def test_on_postgresql_a_lone_brief_s_close_and_receipt_are_one_round_trip(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close no longer waits for its answer before the receipts are sent: ``BEGIN``, the
    close, the receipt's rows and ``COMMIT`` go in one round trip (two before), and a row that
    was not open any more costs the waiting way after that one (the test above)."""
    if engine.dialect.name != "postgresql":
        pytest.skip("round trips: PostgreSQL")
    from pipeline.store import pg_wire

    trips: list[list[str]] = []  # each round trip's statements, their first words
    real = pg_wire.run_rows

    def counted(dbapi: Any, statements: Any, rows_of: Any) -> Any:
        trips.append([sql.split()[0] for sql, _ in statements])
        return real(dbapi, statements, rows_of)

    injected: list[str] = []
    q, _ = _queue(engine, injected)
    b = _brief()
    outcome = _opened_inject(q, _job(b))
    monkeypatch.setattr(pg_wire, "run_rows", counted)
    q._record([(_job(b), outcome)], [])
    assert trips == [["BEGIN", "WITH", "WITH", "COMMIT"]]  # the close, then the receipt's rows
    assert _states(engine) == {b.msg_id: journal.INJECTED}
    assert [(k, r.msg_id) for k, r in _receipts(engine)] == [("INJECTED", b.msg_id)]


def test_a_journaled_msg_id_is_never_injected_again(engine: Engine) -> None:
    injected: list[str] = []
    q, _ = _queue(engine, injected)
    b = _brief()
    _one(q, _job(b))
    _one(q, _job(b))
    assert injected == [b.msg_id]
    assert len(_receipts(engine)) == 1


def test_a_permanent_inject_failure_closes_failed_with_its_failed(engine: Engine) -> None:
    from pipeline.errors import InjectError

    def refuse(**kw: Any) -> None:
        raise InjectError("no pane", reason="INJECT_FAILED")

    entities = LocalEntities()
    entities.register(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=CallbackInjector(refuse),
    )
    q = InjectionQueue(
        entities=entities,
        sessions=session_factory(engine),
        publisher=Publisher(host="B", signer=Signer.generate("B"), topics=TopicNames()),
        metrics=GatewayMetrics(CollectorRegistry()),
    )
    b = _brief()
    _one(q, _job(b))
    assert _states(engine) == {b.msg_id: journal.FAILED}
    [(kind, r)] = _receipts(engine)
    assert (kind, r.reason) == ("FAILED", "INJECT_FAILED")
    assert q.report_uncertain() == 0


def test_an_injector_that_lost_a_handed_over_brief_closes_it_uncertain(engine: Engine) -> None:
    """R-ACK-3: a long-lived child that died holding the whole brief may have injected it: the
    row closes ``uncertain`` with one INJECTED stage uncertain, never a FAILED, never a retry."""
    from pipeline.gateway.injectors import InjectUncertainError

    calls: list[str] = []

    def lose(**kw: Any) -> None:
        calls.append(kw["msg_id"])
        raise InjectUncertainError("child died holding it")

    entities = LocalEntities()
    entities.register(
        gid="worker-b", role=Role.WORKER, delivery=Delivery.INJECT, injector=CallbackInjector(lose)
    )
    metrics = GatewayMetrics(CollectorRegistry())
    q = InjectionQueue(
        entities=entities,
        sessions=session_factory(engine),
        publisher=Publisher(host="B", signer=Signer.generate("B"), topics=TopicNames()),
        metrics=metrics,
    )
    b = _brief()
    _one(q, _job(b))
    assert calls == [b.msg_id]
    assert _states(engine) == {b.msg_id: journal.UNCERTAIN}
    [(kind, r)] = _receipts(engine)
    assert (kind, r.msg_id, r.stage) == ("INJECTED", b.msg_id, "uncertain")
    assert metrics.inject_uncertain.labels("raised")._value.get() == 1
    assert q.report_uncertain() == 0


def test_the_sender_records_an_uncertain_report_apart_from_injected_and_from_timeout(
    tmp_path: Path,
) -> None:
    """Sender side: ``pending`` -> ``uncertain`` (the one outcome), and ``failed`` (an
    INJECT_TIMEOUT came first) -> ``uncertain`` too, so the store keeps that the FAILED may
    have been wrong. A row already ``injected`` is not touched."""
    e = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    sessions = session_factory(e)
    with sessions.begin() as s:
        for mid in ("p", "f", "i"):
            deadlines.track(s, FORWARD, msg_id=mid, sender="main-a", recipient="worker-b",
                            trace_id="t", sent_ms=1, deadline_ms=2)  # fmt: skip
        deadlines.settle(s, FORWARD, "f", deadlines.FAILED, "INJECT_TIMEOUT")
        deadlines.settle(s, FORWARD, "i", FORWARD.answered)
    with sessions.begin() as s:
        assert deadlines.mark_uncertain(s, [FORWARD], "p") == deadlines.PENDING
        assert deadlines.mark_uncertain(s, [FORWARD], "f") == deadlines.FAILED
        assert deadlines.mark_uncertain(s, [FORWARD], "i") is None
        assert deadlines.mark_uncertain(s, [FORWARD], "p") is None
    with sessions() as s:
        states = {m: deadlines.state_of(s, FORWARD, m) for m in ("p", "f", "i")}
    assert states == {"p": "uncertain", "f": "uncertain", "i": "injected"}
    e.dispose()


def test_an_uncertain_injected_reads_may_have_been_injected() -> None:
    from pipeline.envelope.receipts import injected_body

    r = describe(kind="INJECTED", sender="B._gateway", recipient="main-a", msg_id="x",
                 turn_id=None, body=injected_body("b1", "worker-b", stage="uncertain"))  # fmt: skip
    assert "may have been injected" in r.text and r.fields["stage"] == "uncertain"


def test_retention_purges_closed_journal_rows_and_never_an_open_one(engine: Engine) -> None:
    q, _ = _queue(engine, [])
    done, stuck = _brief(), _brief()
    _one(q, _job(done))
    with session_factory(engine).begin() as s:
        journal.open_entry(s, msg_id=stuck.msg_id, gid="worker-b", sender="main-a",
                           reply_host="A", trace_id="t")  # fmt: skip
    [rule] = rules_for(StoreTable.INJECT_JOURNAL)
    policy = RetentionConfig(tracking_finished_s=1.0)
    far = 10**13
    with engine.connect() as c:
        t = journal.journal_table
        gone = {r.msg_id for r in c.execute(select(t.c.msg_id).where(rule.condition(far, policy)))}
        now = {r.msg_id for r in c.execute(select(t.c.msg_id).where(rule.condition(0, policy)))}
    assert gone == {done.msg_id}, "closed rows go; the open one waits for a restart's report"
    assert now == set(), "nothing before its retention"


def test_the_relay_is_woken_after_the_commit_that_staged_the_receipts(engine: Engine) -> None:
    """docs/outbox.md invariant 9: the receipts' transaction runs no ORM session (no
    ``after_commit`` wake), so the queue wakes its relay itself, once per transaction that
    staged receipts, when they are committed: a fresh connection already reads them."""
    injected: list[str] = []
    q, _ = _queue(engine, injected)
    seen: list[int] = []
    q.on_receipts = lambda: seen.append(len(_receipts(engine)))
    b = _brief()
    _one(q, _job(b))
    assert seen == [1], "woken once, with the receipt committed"
    q.submit("worker-b", _brief(), reply_host=None)  # a broadcast: no receipt, no wake
    _wait(q)
    q.stop()
    assert seen == [1]


def test_the_relay_is_handed_the_committed_receipts_as_stored(engine: Engine) -> None:
    """docs/outbox.md invariant 10: with a relay fed in this process, the receipts' rows reach
    it before its wake, exactly as stored (R-OUT-3), and its wake then asks for no read; a
    transaction that rolled back hands nothing over."""
    from pipeline.outbox.feed import Feed
    from pipeline.outbox.fetch import COLUMNS
    from pipeline.outbox.wake import feed_from, stop_feeding

    feed = Feed()
    feed_from(engine, feed)
    try:
        q, _ = _queue(engine, [])
        woken: list[tuple[list[Any] | None, bool]] = []
        q.on_receipts = lambda: woken.append((feed.take(), feed.woken_by_put()))
        _one(q, _job(_brief()))
        with engine.connect() as c:
            stored = [
                tuple(r) for r in c.exec_driver_sql(f"SELECT {', '.join(COLUMNS)} FROM outbox")
            ]
        assert woken == [(stored, True)] and len(stored) == 1
        with pytest.raises(RuntimeError), q._tx.begin() as tx:
            q.publisher.stage(tx, _brief(), to_host="A")
            raise RuntimeError("rolled back")
        q._tx.hand_over()
        assert feed.take() == [] and not feed.woken_by_put()
        q.stop()
    finally:
        stop_feeding(engine, feed)
