"""The in-process wake: a relay woken by the commits that carried outbox rows, and no others.

:func:`~pipeline.outbox.write` marks its session (:func:`mark`); :func:`wake_on_commit` has a
session factory call ``wake`` after each commit of a transaction so marked. A commit that wrote
no outbox row (a held REPLY, a dedupe claim, a presence or maintenance write) costs the relay
nothing: it used to wake it for a pass that found nothing, one per inbox batch under load.

Invariant (docs/outbox.md, invariant 9): a row written through a session of the factory is
fetched at once after its transaction commits, never before -- ``after_commit`` runs once the
DB-API ``COMMIT`` has returned. A mark left by a transaction that rolled back is cleared with it;
a savepoint rolled back inside a committed transaction may leave one wake that finds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

_WROTE = "fleet_outbox_wrote"  # session.info: this transaction wrote outbox rows


def mark(session: Session) -> None:
    """Outbox rows were written in ``session``'s transaction (called by ``write``)."""
    session.info[_WROTE] = True


def wake_on_commit(sessions: sessionmaker[Session], wake: Callable[[], None]) -> None:
    """Call ``wake`` after each commit, by a session of ``sessions``, that wrote outbox rows."""

    def after_commit(session: Session) -> None:
        if session.info.pop(_WROTE, False):
            wake()

    def after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:  # the outermost one: committed (woken) or rolled back
            session.info.pop(_WROTE, None)

    listeners: tuple[tuple[str, Callable[..., Any]], ...] = (
        ("after_commit", after_commit),
        ("after_transaction_end", after_transaction_end),
    )
    for name, fn in listeners:
        event.listen(sessions, name, fn)
