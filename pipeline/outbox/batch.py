"""One batch in flight: the rows handed to the producer together and their delivery reports."""

from __future__ import annotations

from typing import Any

from pipeline.errors import BrokerError
from pipeline.kafka.produce_errors import permanent_error, permanent_reason

from .terminal import FailedRow

_UNRESOLVED: Any = object()
# A row not handed to the producer because an earlier row of its branch was refused: it simply
# stays pending (neither a delivery failure nor a retry of its own).
HELD_BACK: Any = object()


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

    def refused(self) -> list[FailedRow]:
        """The rows the broker refused for good (the first one per branch)."""
        out: list[FailedRow] = []
        seen: set[tuple[str, str]] = set()
        for row, err in zip(self.rows, self.results, strict=True):
            reason = permanent_reason(err) if err is not HELD_BACK else None
            if reason is not None and (row[1], row[2]) not in seen:
                seen.add((row[1], row[2]))
                error = permanent_error(err, topic=row[4])
                out.append(FailedRow.of(row, reason=reason.value, error=error[:500]))
        return out
