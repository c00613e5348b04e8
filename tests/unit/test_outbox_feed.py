"""The relay's feed (pipeline/outbox/feed.py): a handed-over row is shipped from memory only when
it is exactly the next unsent row of its branch; anything else sends the pass to the store
(docs/outbox.md, invariants 2 and 4: order per branch, R-OUT-3)."""

from __future__ import annotations

from typing import Any

from pipeline.outbox.feed import Feed, Known


def _row(id_: int, branch: str, lsn: int) -> tuple[Any, ...]:
    return (id_, "t", branch, lsn, "topic", b"k", b"v", None, 0.0)


def test_rows_of_a_known_branch_are_shipped_in_lsn_order_and_older_ones_dropped() -> None:
    known = Known()
    known.confirmed([_row(1, "a", 1), _row(2, "b", 5)])
    # handed over out of order (two commits' hand-offs raced): id order restores lsn order
    rows = [_row(5, "a", 3), _row(4, "a", 2), _row(6, "b", 6), _row(2, "b", 5)]
    assert known.next_rows(rows, set()) == [_row(4, "a", 2), _row(5, "a", 3), _row(6, "b", 6)]


def test_a_gap_an_unknown_branch_a_repeated_lsn_or_a_stopped_branch_means_read() -> None:
    known = Known()
    known.confirmed([_row(1, "a", 1)])
    assert known.next_rows([_row(3, "a", 3)], set()) is None  # lsn 2 not handed over (yet)
    assert known.next_rows([_row(3, "z", 1)], set()) is None  # never confirmed since start
    assert known.next_rows([_row(2, "a", 2), _row(3, "a", 2)], set()) is None  # lsn 2 twice
    assert known.next_rows([_row(2, "a", 2)], {("t", "a")}) is None  # stopped
    known.forget()  # after a failure: nothing is known, every pass reads
    assert known.next_rows([_row(2, "a", 2)], set()) is None


def test_a_hand_off_from_a_savepoint_or_past_the_bound_is_not_used() -> None:
    feed = Feed(max_rows=2)
    feed.put([_row(1, "a", 1)], trusted=True)
    assert feed.take() == [_row(1, "a", 1)]
    feed.put([_row(2, "a", 2)], trusted=False)  # written inside a savepoint: may be gone
    feed.put([_row(3, "a", 3)], trusted=True)
    assert feed.take() is None  # read the store (it has every committed row)
    assert feed.take() == []
    feed.put([_row(4, "a", 4), _row(5, "a", 5), _row(6, "a", 6)], trusted=True)  # too many
    assert feed.take() is None


def test_only_the_committing_threads_next_wake_is_counted_as_fed() -> None:
    feed = Feed()
    assert not feed.woken_by_put()
    feed.put([_row(1, "a", 1)], trusted=True, by_committer=True)
    assert feed.woken_by_put()
    assert not feed.woken_by_put()  # once
