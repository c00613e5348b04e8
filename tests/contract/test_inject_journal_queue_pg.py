"""The inject journal's rules (R-ACK-3, R-ACK-4) held by the injection queue on PostgreSQL.

On PostgreSQL a burst opens in one autocommitted statement and closes in a transaction whose
``BEGIN`` rides with the close and whose ``NOTIFY`` rides with the ``COMMIT``
(``pipeline.store.pg_pipeline``). The queue's tests, written in
``tests/unit/test_inject_journal.py``, run here again on a real PostgreSQL whose writes send
``NOTIFY`` (a relay in another process, ``fleet relay run``); that file runs them on SQLite and
on PostgreSQL woken in process, as the gateway's store is (its receipts carry the ``COMMIT``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from pipeline.store import make_engine
from tests.unit.test_inject_journal import (
    test_a_burst_keeps_at_most_burst_rows_open_each_its_own_burst,
    test_a_crash_after_the_inject_leaves_the_row_open_and_the_restart_reports_it_uncertain,
    test_a_journaled_msg_id_is_never_injected_again,
    test_a_permanent_inject_failure_closes_failed_with_its_failed,
    test_each_inject_closes_its_row_and_stages_its_injected_at_once,
    test_the_row_is_committed_before_the_inject_runs,
    test_whoever_closes_the_row_first_sends_the_one_outcome,
    test_with_burst_one_each_inject_sees_exactly_its_own_row_open,
)

__all__ = [
    "test_a_burst_keeps_at_most_burst_rows_open_each_its_own_burst",
    "test_a_crash_after_the_inject_leaves_the_row_open_and_the_restart_reports_it_uncertain",
    "test_a_journaled_msg_id_is_never_injected_again",
    "test_a_permanent_inject_failure_closes_failed_with_its_failed",
    "test_each_inject_closes_its_row_and_stages_its_injected_at_once",
    "test_the_row_is_committed_before_the_inject_runs",
    "test_whoever_closes_the_row_first_sends_the_one_outcome",
    "test_with_burst_one_each_inject_sees_exactly_its_own_row_open",
]


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    if not store_url.startswith("postgresql"):
        pytest.skip("the SQLite runs are tests/unit/test_inject_journal.py")
    e = make_engine(store_url)
    yield e
    e.dispose()


def test_a_receipt_s_commit_wakes_a_relay_listening_in_another_process(engine: Engine) -> None:
    """docs/outbox.md invariant 9 on PostgreSQL: the receipts' transaction has no ORM session
    to send ``NOTIFY``; it rides with the ``COMMIT`` itself, so a relay of ``fleet relay run``
    is woken at once."""
    import threading

    from pipeline.outbox.notify import listen
    from tests.unit.test_inject_journal import _brief, _job, _one, _queue

    stop, woken = threading.Event(), threading.Event()
    thread = listen(engine, woken.set, stop)
    assert thread is not None
    try:
        assert woken.wait(30)  # the first wake: once listening
        woken.clear()
        q, _ = _queue(engine, [])
        _one(q, _job(_brief()))
        assert woken.wait(30), "the receipt's commit notified"
        q.stop()
    finally:
        stop.set()
        thread.join(10)
