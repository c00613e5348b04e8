"""PostgreSQL: wake a relay in another process the moment outbox rows commit (LISTEN/NOTIFY).

Every :func:`~pipeline.outbox.write` on PostgreSQL issues ``NOTIFY fleet_outbox`` in the writer's
transaction; PostgreSQL delivers it only when that transaction commits (never for a rollback)
and folds repeats within one transaction into one. Not from a process whose writers wake its own
relay (:func:`woken_in_process`, the gateway): a notifying commit holds one lock of the whole
server from its ``NOTIFY`` until its commit is flushed, so notifying commits flush one at a time,
never together -- the gateway's sends and receipts, both hosts' on one server, queued behind
each other's disk flush for a wake-up the gateway gives its relay in process anyway. A relay in its own process (``fleet relay
run``) listens on a connection of its own and wakes on each notification instead of waiting out
its idle poll. A lost notification (the listener reconnecting) costs only latency: the relay
still polls. SQLite has no such channel: there the gateway, the store's one writer, wakes its
in-process relay directly (docs/gateway.md, "The local socket").
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from pipeline.store import pg_pipeline

log = logging.getLogger(__name__)

CHANNEL = "fleet_outbox"
_NOTIFY_SQL = f"NOTIFY {CHANNEL}"
_NOTIFY = text(_NOTIFY_SQL)


_NOTIFIED = "fleet_outbox_notified"  # session.info: the transaction that already notified
_WOKEN_HERE: weakref.WeakSet[Engine] = weakref.WeakSet()


def woken_in_process(engine: Engine) -> None:
    """Writes on ``engine`` in this process wake this process's relay themselves (the gateway:
    its socket commits, receipts and session commits call ``Relay.wake``): they send no
    ``NOTIFY``. A writer that does not wake it is fetched at the relay's next idle poll, as on
    SQLite; writers in other processes still notify."""
    _WOKEN_HERE.add(engine)


def wakes_in_process(bind: Any) -> bool:
    """Whether ``bind`` (an engine or a connection) writes for a relay woken in process
    (:func:`woken_in_process`): its writers send no ``NOTIFY``."""
    return getattr(bind, "engine", bind) in _WOKEN_HERE


def notify(session: Session) -> None:
    """Tell listeners, at this transaction's commit, that outbox rows were written. Once per
    transaction: PostgreSQL folds repeats anyway, and each costs a round trip (a group commit
    of many sends paid one per row). Inside a savepoint it always notifies: a rolled
    back savepoint takes its NOTIFY with it."""
    if wakes_in_process(session.get_bind()):
        return
    tx = session.get_transaction()
    if tx is not None and session.info.get(_NOTIFIED) is tx:
        return
    if not session.in_nested_transaction() and pg_pipeline.defer(
        session.connection(), _NOTIFY_SQL, [()]
    ):
        pass  # a transaction that sends its writes with its COMMIT: it rides with them
    else:
        session.execute(_NOTIFY)
    if tx is not None and not session.in_nested_transaction():
        session.info[_NOTIFIED] = tx


def listen(
    engine: Engine, wake: Callable[[], None], stop: threading.Event
) -> threading.Thread | None:
    """On PostgreSQL, a daemon thread calling ``wake`` on every ``NOTIFY fleet_outbox`` until
    ``stop``; ``None`` (nothing to listen to) on any other database."""
    if engine.dialect.name != "postgresql":
        return None
    thread = threading.Thread(
        target=listen_forever, args=(engine, wake, stop), name="outbox-listen", daemon=True
    )
    thread.start()
    return thread


def listen_forever(engine: Engine, wake: Callable[[], None], stop: threading.Event) -> None:
    """Call ``wake`` on every ``NOTIFY fleet_outbox`` until ``stop`` (PostgreSQL only)."""
    import psycopg

    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                wake()  # rows may have committed before we listened
                while not stop.is_set():
                    for _ in conn.notifies(timeout=0.5, stop_after=1):
                        wake()
        except psycopg.Error as exc:
            log.warning("outbox listener: %s; the relay polls meanwhile, reconnecting", exc)
            with contextlib.suppress(Exception):
                stop.wait(1.0)
