"""A secured cluster's refusals as stable reasons, found fast instead of retried forever.

librdkafka treats a refused login or TLS handshake like a broker outage: it reconnects with
backoff for ever and reports each attempt to the ``error_cb``. This module names what those
errors mean (``Security`` reasons, ``docs/security.md``) and :func:`check_access` turns the first
one into a :class:`~pipeline.errors.SecurityError` within a bound::

    _AUTHENTICATION, SASL_AUTHENTICATION_FAILED           -> AUTH_FAILED (a refused password,
                                                             token, or a token the issuer
                                                             refused to give)
    a TLS alert from the broker about our certificate       -> AUTH_FAILED (mutual TLS: the
                                                             client certificate is the login)
    _SSL, or a transport error whose text is a TLS failure -> TLS_FAILED
    an OIDC token endpoint that cannot be reached           -> none: an outage, not a refusal
    "Request not valid in current SASL state" (a re-        -> none: a protocol step refused,
    authentication that met a request in flight), a            or the connection lost, not
    SASL handshake cut by a local transport failure            the credential
    a transport error that says "security.protocol"        -> PROTOCOL_MISMATCH
    TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED -> NOT_AUTHORIZED (resource + op)

Messages are redacted against the client's password before they go anywhere.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from pipeline.errors import SecurityError
from pipeline.reasons import Security

from .security import KafkaSecurity

AUTH_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
RESOURCE_OF = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional_id",
}
_TLS_WORDS = ("ssl handshake", "certificate verify", "ssl_", "tls ", "certificate")
# The alerts a broker sends when it refuses the client's certificate (OpenSSL's texts: "sslv3
# alert certificate unknown", "tlsv13 alert certificate required", "tlsv1 alert unknown ca").
# An alert is the peer's verdict on *our* certificate; our own verdict on the broker's is
# "certificate verify failed", which stays TLS_FAILED.
_CERT_ALERTS = (
    "alert certificate unknown",
    "alert bad certificate",
    "alert unknown ca",
    "alert certificate required",
    "alert certificate revoked",
    "alert certificate expired",
    "alert unsupported certificate",
    "alert access denied",
)
# librdkafka's OIDC fetch failed without an answer from the issuer (libcurl's texts)
_TOKEN_FAILED = "failed to acquire sasl oauthbearer token"
_ISSUER_AWAY = (
    "could not connect",
    "failed to connect",
    "couldn't connect",
    "timeout was reached",
    "timed out",
    "could not resolve",
    "couldn't resolve",
    "connection refused",
    "(5",  # an HTTP 5xx: the issuer is there but failing, not refusing
)


# A re-authentication (KIP-368) that met a request in flight (the broker refused the protocol
# step, not the credential), or a handshake cut by the connection going down (librdkafka's own
# "Local:" error): librdkafka reconnects and logs in afresh; neither is a refused login
_SASL_STATE = "not valid in current sasl state"
_HANDSHAKE_CUT = "handshake failed: local:"


def _not_the_credential(text: str) -> bool:
    return _SASL_STATE in text or _HANDSHAKE_CUT in text


def issuer_away(text: str) -> bool:
    """An OAUTHBEARER token could not be fetched because the issuer did not answer (or failed
    with 5xx): an outage, waited out like a broker that is down, never AUTH_FAILED."""
    text = text.lower()
    return _TOKEN_FAILED in text and any(w in text for w in _ISSUER_AWAY)


def refusal_reason(err: KafkaError) -> Security | None:
    """The Security reason ``err`` stands for, or None for an ordinary broker error."""
    code = err.code()
    text = (err.str() or "").lower()
    if code in AUTH_CODES:
        return None if issuer_away(text) or _not_the_credential(text) else Security.AUTH_FAILED
    if code in (KafkaError._SSL, KafkaError._TRANSPORT) and any(a in text for a in _CERT_ALERTS):
        return Security.AUTH_FAILED
    if code in RESOURCE_OF:
        return Security.NOT_AUTHORIZED
    if code == KafkaError._TRANSPORT and "security.protocol" in text:
        return Security.PROTOCOL_MISMATCH  # librdkafka's own hint, or RefusalWatch's
    if code == KafkaError._SSL or (
        code == KafkaError._TRANSPORT and any(w in text for w in _TLS_WORDS)
    ):
        return Security.TLS_FAILED
    return None


def redact(text: str, security: KafkaSecurity | None) -> str:
    if security is not None and security.sasl_password is not None:
        text = text.replace(security.sasl_password.reveal(), "***")
    return text


def security_error(
    err: KafkaError,
    what: str,
    *,
    security: KafkaSecurity | None = None,
    resource: str | None = None,
) -> SecurityError | None:
    """``err`` as a :class:`SecurityError`, or None when it is no security refusal."""
    reason = refusal_reason(err)
    if reason is None:
        return None
    detail = redact(err.str() or err.name(), security)
    context: dict[str, Any] = {"code": err.name(), "operation": what}
    if reason is Security.NOT_AUTHORIZED:
        context["resource_type"] = RESOURCE_OF[err.code()]
        if resource is not None:
            context["resource"] = resource
    if security is not None and security.sasl_username is not None:
        context["principal"] = f"User:{security.sasl_username}"
    hint = _HINTS[reason]
    if reason is Security.AUTH_FAILED and security is not None:
        hint = _auth_hint(security)
    target = (
        f" {context['resource_type']} {resource}" if resource and "resource_type" in context else ""
    )
    return SecurityError(
        f"{what}{target}: {err.name()}: {detail} ({hint})",
        reason=reason.value,
        retriable=False,
        context=context,
    )


_HINTS = {
    Security.AUTH_FAILED: "check sasl_username and the password file/variable",
    Security.TLS_FAILED: "check ssl_ca_location: it must hold the CA that signed the broker",
    Security.PROTOCOL_MISMATCH: "check security_protocol against the broker's listener",
    Security.NOT_AUTHORIZED: "an ACL is missing: see fleet acls plan",
}


def _auth_hint(security: KafkaSecurity) -> str:
    if security.oauth:
        return (
            "check the OAuth client id and secret, the token endpoint, and that the token's "
            "audience and issuer are the ones the broker expects"
        )
    if security.sasl_username is None and security.ssl_certificate_location is not None:
        return (
            "the broker refused the client certificate: is it signed by a CA the listener "
            "trusts, unexpired, not revoked?"
        )
    return _HINTS[Security.AUTH_FAILED]


class RefusalWatch:
    """An ``error_cb`` and ``logger`` that keep the first security refusal a client reports.

    librdkafka reports a refused login (``_AUTHENTICATION``) and a refused handshake (``_SSL``)
    to the ``error_cb``. A plaintext client on a TLS listener only sees the connection closed
    during its first request, logged, not reported; :data:`MISMATCH_AFTER` such closes in a row
    count as PROTOCOL_MISMATCH. Log lines are passed on to ``inner`` (the package's logger).
    """

    MISMATCH_AFTER = 3

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self._first: KafkaError | None = None
        self._closes = 0
        self.down = False
        self._lock = threading.Lock()

    def __call__(self, err: KafkaError) -> None:
        if refusal_reason(err) is not None:
            with self._lock:
                if self._first is None:
                    self._first = err
        elif "Connection refused" in (err.str() or ""):
            self.down = True  # nobody listens: an outage, not a refusal (wait_out's job)

    def log(self, level: int, fmt: str, *args: object) -> None:
        if self.inner is not None:
            self.inner.log(level, fmt, *args)
        line = str(args[-1]) if args else fmt
        if "Disconnected" in line and "state APIVERSION_QUERY" in line:
            with self._lock:
                self._closes += 1
                closes = self._closes
            if closes >= self.MISMATCH_AFTER:
                self(KafkaError(KafkaError._TRANSPORT, f"{line}: {_CLOSED_EARLY}"))

    @property
    def first(self) -> KafkaError | None:
        with self._lock:
            return self._first


_CLOSED_EARLY = (
    "the listener closed every connection at the first request, as a TLS or SASL listener does "
    "with a client of another security.protocol"
)


def check_access(
    conf: dict[str, Any],
    *,
    security: KafkaSecurity,
    admin: Callable[[dict[str, Any]], Any],
    timeout_s: float = 15.0,
) -> None:
    """Connect once with the client settings ``conf`` (``admin`` applies the login) and fail
    within ``timeout_s`` with AUTH_FAILED / TLS_FAILED / PROTOCOL_MISMATCH when the cluster
    refuses us. A cluster that is merely down is not a refusal: then this returns after the
    bound and the caller's own waiting (``wait_out``) reports it."""
    watch = RefusalWatch(inner=conf.get("logger"))
    client = admin(dict(conf, error_cb=watch, logger=watch))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client.poll(0.1)  # serves error_cb and the log lines
        if watch.first is not None:
            break
        if watch.down:
            return  # a broker that is down is waited out by the caller, not here
        try:
            client.list_topics(timeout=0.5)
            return
        except Exception:  # noqa: BLE001 - not yet; the watch says whether it is a refusal
            continue
    first = watch.first
    if first is not None:
        error = security_error(first, "connecting to Kafka", security=security)
        assert error is not None
        raise error
