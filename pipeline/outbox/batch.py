"""One batch in flight: the rows handed to the producer together and their delivery reports."""

from __future__ import annotations

from typing import Any

from pipeline.errors import BrokerError

_UNRESOLVED: Any = object()


class Batch:
    """Rows handed to the producer together, and their delivery reports as they come in."""

    __slots__ = ("done", "failures", "results", "rows")

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows
        self.results: list[Any] = [_UNRESOLVED] * len(rows)
        self.done = 0
        self.failures = 0

    def report(self, index: int, err: Any, _msg: Any) -> None:
        if self.results[index] is _UNRESOLVED:
            self.done += 1
        if err is not None:
            self.failures += 1
        self.results[index] = err

    def confirmed(self, broken: set[tuple[str, str]]) -> tuple[list[Any], list[Any]]:
        """``(rows to ack, errors)``; adds every branch with a failed row to ``broken``."""
        # Rows come in id order, which is lsn order within a branch, and each branch continues
        # from its lowest pending lsn; acking only the unbroken confirmed run keeps "sent" a
        # per-branch watermark: after a failure the branch is resent from the failed row on.
        if self.done == len(self.rows) and not self.failures and not broken:
            return self.rows, []  # the common case: everything confirmed
        confirmed: list[Any] = []
        errors: list[Any] = []
        for row, err in zip(self.rows, self.results, strict=True):
            if err is not None:
                errors.append(BrokerError("no delivery report") if err is _UNRESOLVED else err)
            branch = (row[1], row[2])
            if branch in broken:
                continue
            if err is None:
                confirmed.append(row)
            else:
                broken.add(branch)
        return confirmed, errors
