"""Writes a handler wants, staged per record and flushed per batch in ONE transaction.

A handler never touches the database directly: it stages rows (``insert``), deferred calls that
need the batch session (``call``, e.g. an outbox write that assigns an lsn) and effects that may
only run after the offset commit (``after_commit``: the forward path's inject). A record whose
outcome is ``Retry`` has its staging discarded, so a failed record leaves no partial writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

SessionCall = Callable[[Session], object]
Effect = Callable[[], None]


@dataclass
class Staged:
    """A record's staged writes and after-commit effects (see the module docstring)."""

    inserts: list[tuple[Table, dict[str, Any]]] = field(default_factory=list)
    calls: list[SessionCall] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)

    def insert(self, table: Table, row: dict[str, Any]) -> None:
        self.inserts.append((table, row))

    def call(self, fn: SessionCall) -> None:
        self.calls.append(fn)

    def after_commit(self, fn: Effect) -> None:
        self.effects.append(fn)

    def merge(self, other: Staged) -> None:
        self.inserts.extend(other.inserts)
        self.calls.extend(other.calls)
        self.effects.extend(other.effects)

    def flush(self, session: Session) -> None:
        """Bulk-insert rows table by table (executemany), then run calls in staging order."""
        by_table: dict[Table, list[dict[str, Any]]] = {}
        for table, row in self.inserts:
            by_table.setdefault(table, []).append(row)
        for table, rows in by_table.items():
            session.execute(insert(table), rows)
        for fn in self.calls:
            fn(session)

    def empty(self) -> bool:
        return not (self.inserts or self.calls or self.effects)
