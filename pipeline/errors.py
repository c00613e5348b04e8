"""One error root for the whole package, with a ``retriable`` flag.

Callers decide what to do from two attributes, never from an ``isinstance`` ladder:

* ``retriable`` -- ``True`` when the same operation may succeed if tried again later
  (broker unreachable, request timed out, database locked).
* ``reason`` -- a stable, upper-case reason code. Reason codes are public API: dashboards,
  alert rules and runbooks key on them, so they never change meaning once released.

The tree::

    FleetError                       (reason, retriable)
    ├── ConfigError                  bad configuration or CLI input; never retriable
    ├── LauncherError                the local KRaft broker could not be set up or started
    │   ├── JavaNotFound             java missing or older than 17
    │   ├── ArtifactUnresolved       Maven could not resolve a named artifact
    │   ├── PortInUse                a requested port is taken
    │   └── BrokerNotReady           the broker never answered; carries the log tail
    ├── TopologyError                topic layout differs from what we declare (e.g. partitions)
    ├── EnvelopeError                a record failed decoding or verification; keeps the raw record
    ├── BrokerError                  a Kafka client call failed (retriable per librdkafka)
    │   └── SecurityError            the cluster refused us: AUTH_FAILED, TLS_FAILED,
    │                                PROTOCOL_MISMATCH, NOT_AUTHORIZED; never retriable
    ├── FencedError                  FENCED: another member with our static id took over; stop
    ├── OffsetsLostError             OFFSETS_LOST: the committed offset fell off retention
    ├── StoreError                   a database call failed
    │   └── SchemaError              the store is not at this code's schema head (store/schema.py:
    │                                STORE_SCHEMA_OUTDATED / STORE_SCHEMA_AHEAD); never retriable
    ├── DeliveryError                a send could not be routed or confirmed (unknown recipient ...)
    └── InjectError                  a local inject into a worker did not land; retriable only when
                                     nothing reached the target (TARGET_BUSY)

``FencedError`` and ``OffsetsLostError`` are the two a gateway exits on with code 3 (fenced /
fatal): an operator must act, a restart alone does not help. Reason codes come from the registry
``pipeline.reasons`` (one ``StrEnum`` per family).

Every error keeps its context (the raw record for an envelope error) so the caller can
dead-letter it: nothing is dropped on an error path.
"""

from __future__ import annotations

from typing import Any

from pipeline.reasons import (
    Config,
    Delivery,
    Failure,
    Inject,
    Launcher,
    Platform,
    Security,
    Verification,
)


class FleetError(Exception):
    """Root of every error this package raises on purpose."""

    reason: str = Platform.FLEET_ERROR
    retriable: bool = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retriable: bool | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason
        if retriable is not None:
            self.retriable = retriable
        self.context: dict[str, Any] = dict(context or {})

    def __str__(self) -> str:
        return f"[{self.reason}] {super().__str__()}"


class ConfigError(FleetError):
    reason: str = Config.CONFIG_INVALID


class LauncherError(FleetError):
    reason: str = Launcher.LAUNCHER_FAILED


class JavaNotFound(LauncherError):
    reason: str = Launcher.JAVA_NOT_FOUND


class ArtifactUnresolved(LauncherError):
    reason: str = Launcher.ARTIFACT_UNRESOLVED


class PortInUse(LauncherError):
    reason: str = Launcher.PORT_IN_USE


class BrokerNotReady(LauncherError):
    reason: str = Launcher.BROKER_NOT_READY
    retriable = True


class TopologyError(FleetError):
    reason: str = Platform.TOPOLOGY_MISMATCH


class EnvelopeError(FleetError):
    """A record that failed decode or verification. ``raw`` keeps it for the dead letter."""

    reason: str = Verification.MALFORMED_HEADERS

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        raw: Any = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, retriable=False, context=context)
        self.raw = raw


class BrokerError(FleetError):
    reason: str = Platform.BROKER_ERROR
    retriable = True


class SecurityError(BrokerError):
    """A secured cluster refused this client; waiting does not help, an operator must act.

    ``context`` names ``resource`` and ``operation`` for NOT_AUTHORIZED where known; it never
    holds a credential."""

    reason: str = Security.AUTH_FAILED
    retriable = False


class StoreError(FleetError):
    reason: str = Platform.STORE_ERROR
    retriable = True


class DeliveryError(FleetError):
    reason: str = Delivery.DELIVERY_FAILED


class InjectError(FleetError):
    """A local inject (forward path) did not land.

    ``retriable=True`` is a promise that nothing reached the target (reason ``TARGET_BUSY``), so
    trying again cannot inject twice. Every other reason (``INJECT_FAILED``, ``INJECT_TIMEOUT``,
    ``INJECT_BODY_INVALID``) is final: the forward path is at-most-once (R-ACK-6).
    """

    reason: str = Inject.INJECT_FAILED


class FencedError(FleetError):
    """Another member with our ``group.instance.id`` took over (or we are a zombie): stop."""

    reason: str = Failure.FENCED


class OffsetsLostError(FleetError):
    """The group's committed position no longer exists on the broker; never skipped silently.

    ``context`` (and ``lost``, a ``pipeline.runtime.offsets.LostRange``) name group, topic,
    partition, committed offset, log start/end and how many offsets were lost.
    """

    reason: str = Failure.OFFSETS_LOST
    retriable = False

    def __init__(self, message: str, *, lost: Any, context: dict[str, Any]) -> None:
        super().__init__(message, context=context)
        self.lost = lost
