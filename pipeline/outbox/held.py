"""A pooled DB-API connection the relay keeps from one statement to the next, with no transaction open.

A relay pass at a few hundred rows a second reads and acks a row or three. Taking a pooled
connection for each read and each ack and giving it back (the checkout, the pool's reset on
return -- on PostgreSQL a ``ROLLBACK`` round trip) cost more CPU than the statements themselves
(measured per call, client CPU: PostgreSQL read 164 -> 47 µs, ack 148 -> 36 µs).

So the reader and the acker each hold one connection. Between uses it holds no transaction, so
it keeps no snapshot and no lock: on SQLite the driver runs in autocommit (``isolation_level =
None``, :func:`pipeline.store.make_engine`), and a write is an explicit ``BEGIN IMMEDIATE`` ...
``COMMIT``; elsewhere the DB-API connection is switched to autocommit while held (each statement
its own transaction) and switched back before it returns to the pool. A connection left unused
for ``idle_s`` is pinged before its next use, as the pool pings an idle connection
(:func:`pipeline.store.engine.ping_when_idle`); one that fails the ping or a statement is
dropped (:meth:`HeldConnection.drop`), and the next use takes a fresh one from the pool.

``settings`` (PostgreSQL only) are planner settings for the statements of the holder: ``SET``
on the connection when it is taken, ``RESET`` before it goes back to the pool (a connection that
cannot be reset is discarded, never handed on with them).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from pipeline.store.engine import PING_IDLE_S


class HeldConnection:
    """One pooled connection, held between uses by one thread at a time (see the module doc).

    Its owner closes it (the relay's ``close``); one dropped without that closes its connection
    when it is collected (its engine may be disposed by then: the pool could not close it)."""

    def __init__(
        self,
        engine: Engine,
        *,
        idle_s: float = PING_IDLE_S,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self._engine = engine
        self._idle_s = idle_s
        self._autocommit = engine.dialect.name != "sqlite"  # SQLite's driver runs in it already
        for name, value in (settings or {}).items():
            if not (name.replace("_", "").isalnum() and value.replace("_", "").isalnum()):
                raise ValueError(f"not a plain setting: {name} = {value}")
        # SQLite has no planner settings of this kind: they apply on PostgreSQL only
        self._settings = dict(settings or {}) if self._autocommit else {}
        self._held: list[Any] = [None]  # the pool's proxy, shared with the finalizer
        self._used = 0.0
        weakref.finalize(self, _discard, self._held)

    def get(self) -> Any:
        """The pool's connection proxy (``.cursor()``, ``.dbapi_connection``), held from now on."""
        now = time.monotonic()
        conn = self._held[0]
        if conn is not None and now - self._used > self._idle_s:
            try:  # idle a while: checked as the pool checks an idle connection
                self._engine.dialect.do_ping(conn.dbapi_connection)
            except Exception:  # noqa: BLE001 - gone (a store restart): a fresh one below
                self.drop()
                conn = None
        if conn is None:
            conn = self._engine.raw_connection()
            if self._autocommit:
                try:
                    raw: Any = conn.dbapi_connection
                    raw.rollback()  # ends a transaction the checkout's ping may have begun
                    raw.autocommit = True
                    for name, value in self._settings.items():  # the session's, until reset
                        raw.execute(f"SET {name} = {value}")
                except BaseException:
                    conn.invalidate()
                    conn.close()
                    raise
            self._held[0] = conn
        self._used = now
        return conn

    def drop(self) -> None:
        """After a failed statement: the connection's state is not known, the pool discards it."""
        conn, self._held[0] = self._held[0], None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()
                conn.close()

    def close(self) -> None:
        """Back to the pool, as the pool handed it out."""
        _release(self._held, self._autocommit, tuple(self._settings))


def _release(held: list[Any], autocommit: bool, settings: tuple[str, ...] = ()) -> None:
    conn, held[0] = held[0], None
    if conn is None:
        return
    try:
        for name in settings:
            conn.dbapi_connection.execute(f"RESET {name}")
        if autocommit:
            conn.dbapi_connection.autocommit = False
    except Exception:  # noqa: BLE001 - a dead connection: discarded instead
        with contextlib.suppress(Exception):
            conn.invalidate()
    with contextlib.suppress(Exception):
        conn.close()


def _discard(held: list[Any]) -> None:
    conn, held[0] = held[0], None
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.invalidate()  # closes the DB-API connection
