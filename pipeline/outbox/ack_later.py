"""The long-running relay's coalesced ack: confirmed rows marked sent a little later, together.

At a few hundred rows a second each relay pass ships a row or three, and its ack -- a write
transaction queued on the store's write gate -- was paid once per pass. ``run_forever`` instead
keeps the confirmed rows of a clean pass that shipped rows handed over at their commit
(:mod:`.feed`), and acks them with the next ack, at most ``interval_s`` later, or at once when
``max_rows`` are waiting, before any read of the store, when a pass meets a failure, and when
the relay stops cleanly. A pass that read the store acks its rows itself, and ``drain()`` and
``run_once()`` ack before they return, as before.

What this keeps and what it costs (docs/outbox.md, invariant 5 and the crash windows):

* **Sent still means confirmed.** Only rows whose delivery report came back are kept here, and
  the watermark still moves by the guarded ``UPDATE`` (:mod:`.acker`) over each branch's
  unbroken run: the kept rows are acked first, with the rows that follow them.
* **A kill -9 replays more.** Rows confirmed but not yet acked are above the watermark, so a
  relay killed meanwhile sends them again: at most ``max_rows`` more, or what ``interval_s`` of
  traffic brings (the consumer's fold drops the copies, R-OUT-4). A lost ack means a re-send,
  never a loss.
* **The next read starts after them.** The relay's read takes each branch's mark as the higher
  of its stored watermark and the highest lsn kept here (:meth:`marks`), so rows confirmed and
  not yet acked are not sent twice by the same relay. An ack that fails forgets them: they are
  read and sent again from the stored watermark.
"""

from __future__ import annotations

import time
from typing import Any

Branch = tuple[str, str]


class AckLater:
    """Confirmed rows waiting for a coalesced ack (one relay thread uses it)."""

    __slots__ = ("_marks", "due", "interval_s", "max_rows", "rows")

    def __init__(self, *, interval_s: float, max_rows: int) -> None:
        self.interval_s = interval_s
        self.max_rows = max(1, max_rows)
        self.rows: list[Any] = []
        self.due: float | None = None  # monotonic: when the kept rows must be acked
        self._marks: dict[Branch, int] = {}

    def keep(self, rows: list[Any]) -> None:
        """Keep confirmed ``rows`` (lsn order per branch, after the rows kept before)."""
        if not rows:
            return
        if self.due is None:
            self.due = time.monotonic() + self.interval_s
        self.rows += rows
        marks = self._marks
        for row in rows:
            marks[(row[1], row[2])] = row[3]

    def take(self) -> list[Any]:
        """The kept rows, to be acked now ahead of any later ones; none are kept after."""
        rows, self.rows, self.due = self.rows, [], None
        self._marks = {}
        return rows

    def marks(self) -> dict[Branch, int]:
        """Per branch the highest lsn kept (confirmed, not yet acked): the read starts after it."""
        return self._marks

    def full(self) -> bool:
        return len(self.rows) >= self.max_rows

    def is_due(self, now: float | None = None) -> bool:
        return self.due is not None and (time.monotonic() if now is None else now) >= self.due
