"""The in-process wake: a relay woken by the commits that carried outbox rows, and no others.

:func:`~pipeline.outbox.write` marks its session (:func:`mark`); :func:`wake_on_commit` has a
session factory call ``wake`` after each commit of a transaction so marked. A commit that wrote
no outbox row (a held REPLY, a dedupe claim, a presence or maintenance write) costs the relay
nothing: it used to wake it for a pass that found nothing, one per inbox batch under load.

``write`` also notes the row it inserted, and a commit hands the rows over to the relay running
on that engine (:func:`feed_from`, :mod:`.feed`), which wakes it: it ships them without reading
them back. A transaction that holds its session open across commits (the socket's writer) calls
:func:`committed` after each ``COMMIT``; a writer on a bare connection (the inject queue's
receipts) calls :func:`collect` in its transaction, :func:`collected` at its end and
:func:`committed_rows` once its ``COMMIT`` returned.

Invariant (docs/outbox.md, invariant 9): a row written through a session of the factory is
fetched at once after its transaction commits, never before -- ``after_commit`` runs once the
DB-API ``COMMIT`` has returned. A mark left by a transaction that rolled back is cleared with it;
a savepoint rolled back inside a committed transaction may leave one wake that finds nothing
(and its rows, noted inside a savepoint, are never handed over: the relay reads instead).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from .feed import Feed

_WROTE = "fleet_outbox_wrote"  # session.info: this transaction wrote outbox rows
_ROWS = "fleet_outbox_rows"  # session.info: the rows it wrote, as the relay reads them
_NESTED = "fleet_outbox_nested"  # session.info: some were written inside a savepoint
_RAW = "fleet_outbox_raw"  # session.info: the DB-API connection they were written on

_feeds: weakref.WeakKeyDictionary[Engine, Feed] = weakref.WeakKeyDictionary()


def mark(session: Session, row: tuple[Any, ...] | None = None, raw: Any = None) -> None:
    """Outbox rows were written in ``session``'s transaction (called by ``write``); ``row``:
    the one just inserted, in the relay's column order (:data:`.fetch.COLUMNS`), on the DB-API
    connection ``raw``."""
    info = session.info
    info[_WROTE] = True
    if row is not None:
        info[_RAW] = raw
        rows = info.get(_ROWS)
        if rows is None:
            rows = info[_ROWS] = []
        rows.append(row)
        if session.in_nested_transaction():
            info[_NESTED] = True


def collect(conn: Connection) -> None:
    """Note the rows ``write`` inserts on ``conn`` (a bare connection, no ``Session``) from now
    on, in its transaction, for :func:`collected` once it committed."""
    conn.info[_ROWS] = []
    conn.info.pop(_NESTED, None)


def note(conn: Connection, row: tuple[Any, ...]) -> None:
    """``write`` inserted ``row`` on ``conn``: noted if its writer called :func:`collect`."""
    rows = conn.info.get(_ROWS)
    if rows is not None:
        rows.append(row)
        if conn.in_nested_transaction():
            conn.info[_NESTED] = True


def collected(conn: Connection) -> tuple[list[Any], bool]:
    """The rows noted on ``conn`` since :func:`collect` (and stop noting), and whether they
    may be handed over (none inside a savepoint)."""
    nested = conn.info.pop(_NESTED, False)
    return conn.info.pop(_ROWS, None) or [], not nested


def committed_rows(engine: Engine, rows: list[Any], *, trusted: bool) -> bool:
    """``rows``, written on a bare connection of ``engine``, committed: hand them over (the
    caller wakes the relay next; its wake then asks for no read). ``trusted`` only when the
    caller's own transaction committed them (its ``COMMIT`` returned), and none was written
    inside a savepoint. False when there was no relay to hand them to."""
    feed = _feeds.get(engine) if _feeds else None
    if feed is None or not rows:
        return False
    feed.put(rows, trusted=trusted, by_committer=True)
    return True


def wants_rows(engine: Engine) -> bool:
    """A relay in this process is fed the rows committed on ``engine`` (``write`` notes them)."""
    return bool(_feeds) and engine in _feeds


def feed_from(engine: Engine, feed: Feed) -> None:
    """Hand the rows committed on ``engine`` in this process to ``feed`` from now on."""
    _feeds[engine] = feed


def stop_feeding(engine: Engine, feed: Feed) -> None:
    """``feed`` takes no more rows of ``engine`` (another relay's feed stays)."""
    if _feeds.get(engine) is feed:
        _feeds.pop(engine, None)


def committed(session: Session, engine: Engine | None = None) -> bool:
    """``session``'s transaction committed: hand its rows over (the caller wakes the relay
    next; its wake then asks for no read). False when there was no relay to hand them to.
    ``engine``: the session's, when the caller knows it (``Session.get_bind`` is not free)."""
    return _hand_over(session, by_committer=True, engine=engine)


def _hand_over(session: Session, *, by_committer: bool, engine: Engine | None = None) -> bool:
    info = session.info
    rows = info.pop(_ROWS, None)
    nested = info.pop(_NESTED, False)
    raw = info.pop(_RAW, None)
    if rows is None:
        return False
    # committed for real: the connection they were written on is out of its transaction (a
    # session that joined an outer transaction may "commit" while that one is still open)
    trusted = not nested and raw is not None and not _in_transaction(raw)
    if engine is None:
        engine = session.get_bind().engine
    feed = _feeds.get(engine) if _feeds else None
    if feed is None:
        return False
    feed.put(rows, trusted=trusted, by_committer=by_committer)
    return True


def _in_transaction(raw: Any) -> bool:
    """The DB-API connection ``raw`` is inside a transaction (or it cannot tell)."""
    in_tx = getattr(raw, "in_transaction", None)  # sqlite3
    if in_tx is not None:
        return bool(in_tx)
    info = getattr(raw, "info", None)  # psycopg: the libpq status, IDLE out of one
    status = getattr(info, "transaction_status", None)
    return status is None or getattr(status, "name", None) != "IDLE"


def _forget(session: Session) -> None:
    session.info.pop(_WROTE, None)
    session.info.pop(_ROWS, None)
    session.info.pop(_NESTED, None)
    session.info.pop(_RAW, None)


def wake_on_commit(sessions: sessionmaker[Session], wake: Callable[[], None]) -> None:
    """Call ``wake`` after each commit, by a session of ``sessions``, that wrote outbox rows."""

    def after_commit(session: Session) -> None:
        if session.info.pop(_WROTE, False):
            _hand_over(session, by_committer=True)
            wake()

    def after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
        if transaction.parent is None:  # the outermost one: committed (woken) or rolled back
            _forget(session)

    listeners: tuple[tuple[str, Callable[..., Any]], ...] = (
        ("after_commit", after_commit),
        ("after_transaction_end", after_transaction_end),
    )
    for name, fn in listeners:
        event.listen(sessions, name, fn)
