"""A login refused *after* start stops the process, loudly, instead of being retried for ever.

At start, :func:`pipeline.kafka.refusals.check_access` turns a refused login into a
``SecurityError``. Later, a client that only reconnects (the broker restarted, a connection
idled out) meets the refusal inside librdkafka, which treats it like an outage: it reconnects
with backoff for ever and reports each attempt to the client's ``error_cb``. A rotated password
(docs/security.md, "Rotating a login") thus left a gateway running, deaf and mute, with one
de-duplicated log line per five minutes.

:class:`LoginWatch` is put on every client a secured :class:`~pipeline.bootstrap.client.Factories`
builds (it chains the client's own ``error_cb``). The first refused login any of them reports
(``_AUTHENTICATION`` / ``SASL_AUTHENTICATION_FAILED``: a password or a token refused, a token the
OIDC issuer refused to give; a TLS alert refusing the client certificate) becomes one
``AUTH_FAILED``
:class:`~pipeline.errors.SecurityError` (redacted, never retriable) handed to the process's
subscribers: the gateway makes it its fatal error and stops (``fleet gateway run`` exits 3).
Only a refused *login* counts: the broker (or the issuer) says so only when it checked the
credential, never while it is down or restarting (that is an outage, waited out elsewhere); an
OIDC issuer that does not answer is such an outage too (``refusals.issuer_away``).

This module imports no client library: ``Factories.secured`` is cheap for commands that build no
client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.errors import SecurityError

from .security import KafkaSecurity

log = logging.getLogger(__name__)

Listener = Callable[[SecurityError], None]


class LoginWatch:
    """One per process login: the first refused login any client reports, and who to tell."""

    def __init__(self, security: KafkaSecurity) -> None:
        self.security = security
        self._refused: SecurityError | None = None
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    @property
    def refused(self) -> SecurityError | None:
        with self._lock:
            return self._refused

    def wrap(self, conf: Mapping[str, Any]) -> dict[str, Any]:
        """``conf`` with an ``error_cb`` that reports refused logins here, then calls the
        client's own ``error_cb`` (if any) as before."""
        inner = conf.get("error_cb")

        def error_cb(err: Any) -> None:
            self.saw(err)
            if inner is not None:
                inner(err)

        return {**conf, "error_cb": error_cb}

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` once with the refusal (at once if it was already seen)."""
        with self._lock:
            refused = self._refused
            if refused is None:
                self._listeners.append(listener)
        if refused is not None:
            listener(refused)

    def saw(self, err: Any) -> None:
        """An ``error_cb`` error: a refused login is kept and told to every subscriber once."""
        from pipeline.reasons import Security

        from .refusals import refusal_reason, security_error  # the client library is loaded

        if refusal_reason(err) is not Security.AUTH_FAILED:
            return
        with self._lock:
            if self._refused is not None:
                return
            what = f"Kafka refused the login {self.security.principal_hint()} after start"
            refused = security_error(err, what, security=self.security)
            assert refused is not None
            self._refused = refused
            listeners, self._listeners = self._listeners, []
        log.error("%s", refused)
        for listener in listeners:
            try:
                listener(refused)
            except Exception:  # a listener must not break the client's callback
                log.exception("login watch: a listener failed")
