"""The span names, attribute keys and header names of fleet traces (docs/observability.md).

The names are public: dashboards, the tests and the docs key on them."""

from __future__ import annotations

from typing import Final

SEND: Final = "fleet.send"  # a client's (socket, MCP, library) send: envelope built and staged
OUTBOX_COMMIT: Final = "fleet.outbox.commit"  # the outbox row written in the send's transaction
RELAY_PRODUCE: Final = "fleet.relay.produce"  # the relay hands the row to the Kafka producer
INBOX_CONSUME: Final = "fleet.inbox.consume"  # the recipient's gateway consumed and verified it
HOLD: Final = "fleet.hold"  # held for a pull recipient
INJECT: Final = "fleet.inject"  # injected (or not) into a worker: ``fleet.inject.outcome``
RECEIPT_STAGE: Final = "fleet.receipt.stage"  # the INJECTED / FAILED for the brief's sender
FAILED_REPORT: Final = "fleet.failed.report"  # the FAILED reporter answers a dead letter
CONTROL_SPAWN: Final = "fleet.control.spawn"  # a SPAWN request handled
CONTROL_STOP: Final = "fleet.control.stop"  # a STOP request handled
POOL_STEP: Final = "fleet.pool.step"  # one pool step run by a member

SPAN_NAMES: Final = (
    SEND,
    OUTBOX_COMMIT,
    RELAY_PRODUCE,
    INBOX_CONSUME,
    HOLD,
    INJECT,
    RECEIPT_STAGE,
    FAILED_REPORT,
    CONTROL_SPAWN,
    CONTROL_STOP,
    POOL_STEP,
)

#: The W3C trace-context header, beside the envelope's headers and outside its signature's scope:
#: advisory (docs/envelope.md). The signed ``traceId`` is the trace id; a ``traceparent`` whose
#: trace id differs from it is ignored.
TRACEPARENT: Final = "traceparent"

# envelope header names, as pipeline.envelope.reasons spells them (this layer sits below the
# envelope; tests/unit/test_tracing.py holds the two equal)
H_MSG_ID: Final = "msgId"
H_KIND: Final = "kind"
H_TRACE_ID: Final = "traceId"
H_TO: Final = "to"

# attribute keys: OpenTelemetry messaging semantic conventions where they fit, fleet.* otherwise
MESSAGING_SYSTEM: Final = "messaging.system"
DESTINATION: Final = "messaging.destination.name"
MESSAGE_ID: Final = "messaging.message.id"
KAFKA_KEY: Final = "messaging.kafka.message.key"
OPERATION: Final = "messaging.operation.type"
FLEET_KIND: Final = "fleet.kind"
FLEET_HOST: Final = "fleet.host"
FLEET_RECIPIENT: Final = "fleet.recipient"
INJECT_OUTCOME: Final = "fleet.inject.outcome"
