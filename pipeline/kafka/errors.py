"""One place that says which broker errors are waited out and which stop a process.

A gateway must survive what a healthy cluster does on its own (a partition's leader moves, a
just-created topic's metadata has not reached every broker yet, a request times out, a broker
restarts) and must stop, loudly, on what no amount of waiting fixes::

    BrokerErrorClass
    ├── TRANSIENT   leader moves, topic metadata not propagated yet, timeouts, transport errors,
    │               coordinator loading: wait it out with backoff and report it
    ├── FATAL       fencing, a refused login, authorization, offsets lost: stop the process
    └── PERMANENT   this request can never succeed as sent (record too large, bad config) but
                    the process may go on (the relay dead-letters such a row)

Unknown codes: librdkafka's own ``retriable()`` flag decides, else TRANSIENT (a gateway that
keeps retrying and says so beats one that stops on a code nobody listed).

A *request* that failed with librdkafka's local ``_AUTHENTICATION`` is TRANSIENT: it says only
that its connection's login failed, not why. The why reaches the client's ``error_cb``, where
:class:`~pipeline.kafka.login_watch.LoginWatch` judges it: a refused password, token or
certificate stops the process (``AUTH_FAILED``); a KIP-368 re-authentication that met the broker
in the wrong SASL state ("Request not valid in current SASL state") is no refusal, and librdkafka
logs in afresh on a new connection. Stopping on the request's error instead stopped a gateway on
that race (a roster log-end check, under ``connections.max.reauth.ms``). A refused login at
start is :func:`pipeline.kafka.refusals.check_access`'s, before any request.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from pipeline.errors import BrokerError, FleetError
from pipeline.reasons import Broker
from pipeline.support.retrying import Backoff, retry_call

from .refusals import security_error

T = TypeVar("T")


class BrokerErrorClass(enum.StrEnum):
    TRANSIENT = "transient"
    FATAL = "fatal"
    PERMANENT = "permanent"


TRANSIENT_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,  # just after creation, before metadata propagates
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError._WAIT_COORD,
        KafkaError._IN_PROGRESS,
        KafkaError._NOENT,
        KafkaError._AUTHENTICATION,  # a request's connection lost its login (module docstring)
    }
)

FATAL_CODES = frozenset(
    {
        KafkaError._FATAL,
        KafkaError._FENCED,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError._AUTO_OFFSET_RESET,  # offsets lost to retention with reset=error
        KafkaError._SSL,  # a refused TLS handshake does not heal by waiting
    }
)

PERMANENT_CODES = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_CONFIG,
        KafkaError.INVALID_REQUEST,
        KafkaError._INVALID_ARG,
    }
)


def kafka_error_of(exc: BaseException | KafkaError) -> KafkaError | None:
    """The :class:`KafkaError` inside a ``KafkaException`` (or the error itself)."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def classify(err: KafkaError | BaseException) -> BrokerErrorClass:
    """TRANSIENT, FATAL or PERMANENT for one broker error (see the module docstring)."""
    kerr = kafka_error_of(err)
    if kerr is None:
        return BrokerErrorClass.TRANSIENT
    code = kerr.code()
    if kerr.fatal() or code in FATAL_CODES:
        return BrokerErrorClass.FATAL
    if code in TRANSIENT_CODES:
        return BrokerErrorClass.TRANSIENT
    if code in PERMANENT_CODES:
        return BrokerErrorClass.PERMANENT
    return BrokerErrorClass.TRANSIENT


def is_transient(err: KafkaError | BaseException) -> bool:
    return classify(err) is BrokerErrorClass.TRANSIENT


def as_fleet_error(exc: BaseException, what: str) -> FleetError:
    """A broker exception as a :class:`BrokerError` whose ``retriable`` follows :func:`classify`
    (a FleetError passes through unchanged)."""
    if isinstance(exc, FleetError):
        return exc
    kind = classify(exc)
    kerr = kafka_error_of(exc)
    lost_login = kerr is not None and kerr.code() == KafkaError._AUTHENTICATION
    refused = security_error(kerr, what) if kerr is not None and not lost_login else None
    if refused is not None:
        return refused  # AUTH_FAILED, TLS_FAILED, NOT_AUTHORIZED ...: never waited out
    detail = kerr.str() if kerr is not None else str(exc)
    name = kerr.name() if kerr is not None else type(exc).__name__
    reason = {
        BrokerErrorClass.TRANSIENT: Broker.BROKER_UNAVAILABLE,
        BrokerErrorClass.FATAL: Broker.BROKER_FATAL,
        BrokerErrorClass.PERMANENT: Broker.BROKER_REJECTED,
    }[kind]
    return BrokerError(
        f"{what}: {name}: {detail}",
        reason=reason.value,
        retriable=kind is BrokerErrorClass.TRANSIENT,
        context={"code": name},
    )


def wait_out(
    call: Callable[[], T],
    *,
    what: str,
    deadline_s: float,
    log: logging.Logger,
    first_backoff_s: float = 0.2,
    max_backoff_s: float = 10.0,
) -> T:
    """Run ``call``; retry retriable failures (classified here) with doubling backoff until
    ``deadline_s``, reporting the first one and the recovery. Non-retriable errors raise at once."""
    failures = 0

    def attempt() -> T:
        try:
            return call()
        except (KafkaException, FleetError) as exc:
            raise as_fleet_error(exc, what) from exc

    def report(err: Exception, attempt: int, _delay: float) -> None:
        nonlocal failures
        failures = attempt
        if attempt == 1:
            log.warning("%s: %s (transient: waiting it out with backoff)", what, err)

    result = retry_call(
        attempt,
        retriable=lambda err: isinstance(err, FleetError) and err.retriable,
        backoff=Backoff(initial_s=first_backoff_s, max_s=max_backoff_s),
        deadline_s=deadline_s,
        on_retry=report,
    )
    if failures:
        log.info("%s: succeeded after %d transient failures", what, failures)
    return result
