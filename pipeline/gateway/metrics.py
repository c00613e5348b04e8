"""Gateway instruments (registry injected; label values from closed sets only).

Inject latency and inject failures are ``InjectMetrics`` (``pipeline.gateway.injectors``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pipeline import reasons
from pipeline.envelope import ALL_REASONS
from pipeline.envelope.ed25519 import VERIFIER
from pipeline.reasons import Verification

NUDGE_OUTCOMES = ("sent", "failed")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        ns = "fleet_gateway"
        self.verify_failures = Counter(
            f"{ns}_verification_failures_total",
            "Inbox records that failed envelope verification, by reason code.",
            ["reason"],
            registry=registry,
        )
        self.expiries = Counter(
            f"{ns}_expired_total",
            "Messages dead-lettered as EXPIRED (at delivery or by the held-store sweeper).",
            ["where"],
            registry=registry,
        )
        self.injected_timeouts = Counter(
            f"{ns}_injected_timeouts_total",
            "Forward sends with no INJECTED by their deadline (one FAILED each).",
            registry=registry,
        )
        self.inject_deadline_passed = Counter(
            f"{ns}_inject_deadline_passed_total",
            "Briefs refused (INJECT_DEADLINE_PASSED) because their signed inject deadline had "
            "passed: on arrival (inbox, dead-lettered) or waiting in the inject queue (queue).",
            ["where"],
            registry=registry,
        )
        for where in ("inbox", "queue"):
            self.inject_deadline_passed.labels(where)
        self.late_injected = Counter(
            f"{ns}_late_injected_total",
            "INJECTED receipts that reached the sender after its FAILED (the residual window: "
            "injected just before the deadline, the receipt delayed). Each one: that FAILED "
            "was wrong.",
            registry=registry,
        )
        self.inject_uncertain = Counter(
            f"{ns}_inject_uncertain_total",
            "Briefs this host reported to their sender as INJECTED with stage uncertain (may "
            "have been injected): journal rows found open at a start (restart: the gateway died "
            "between deciding to inject and recording it), or an injector that raised (raised).",
            ["why"],
            registry=registry,
        )
        for why in ("restart", "raised"):
            self.inject_uncertain.labels(why)
        self.envelope_verifier = Gauge(
            f"{ns}_envelope_verifier_info",
            "1 on the library that verifies envelope signatures in this gateway: ed25519-dalek "
            "(the optional native module, docs/envelope.md) or libsodium.",
            ["library"],
            registry=registry,
        )
        self.envelope_verifier.labels(VERIFIER).set(1)
        self.receipts_batched = Counter(
            f"{ns}_receipts_batched_total",
            "INJECTED receipts this host sent inside a RECEIPTS record (one record for a burst's "
            "receipts to one sender, docs/gateway.md 'Receipts') rather than one record each.",
            registry=registry,
        )
        self.receipts_unpacked = Counter(
            f"{ns}_receipts_unpacked_total",
            "INJECTED receipts this host read out of RECEIPTS records (each handled as the "
            "single INJECTED it stands for).",
            registry=registry,
        )
        self.uncertain_injected = Counter(
            f"{ns}_uncertain_injected_total",
            "INJECTED receipts with stage uncertain this host's senders received, by what the "
            "tracker held before: pending (the one outcome) or failed (an INJECT_TIMEOUT came "
            "first and may have been wrong).",
            ["before"],
            registry=registry,
        )
        for before in ("pending", "failed"):
            self.uncertain_injected.labels(before)
        self.queue_to_inject_seconds = Histogram(
            f"{ns}_commit_to_inject_seconds",
            "From the offset commit to the inject landing (includes busy-target waits).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.held_total = Counter(
            f"{ns}_held_messages_total",
            "Messages written to the held store (pull path).",
            registry=registry,
        )
        self.no_waiter = Counter(
            f"{ns}_no_waiter_total", "ASKs answered NO_WAITER on arrival.", registry=registry
        )
        self.too_late = Counter(
            f"{ns}_too_late_total", "ANSWERs refused with TOO_LATE.", registry=registry
        )
        self.empty_broadcasts = Counter(
            f"{ns}_empty_broadcasts_total",
            "Broadcasts to a group with no live member: legal silence, nothing sent.",
            registry=registry,
        )
        self.nudges = Counter(
            f"{ns}_nudges_total",
            "Nudges to pull entities with held messages and no open pull, by outcome.",
            ["outcome"],
            registry=registry,
        )
        for outcome in NUDGE_OUTCOMES:
            self.nudges.labels(outcome)
        self.held_oldest_age = Gauge(
            f"{ns}_held_oldest_age_seconds",
            "Age of the oldest undrained held message across this host's pull entities.",
            registry=registry,
        )
        self.sends = Counter(
            f"{ns}_sends_total",
            "Messages sent by local entities, by kind.",
            ["kind"],
            registry=registry,
        )

    def verify_failure(self, reason: str) -> None:
        label = reasons.label(reason, frozenset(ALL_REASONS))
        self.verify_failures.labels(label).inc()
        if reason == Verification.EXPIRED:
            self.expiries.labels("delivery").inc()


SOCKET_OUTCOMES = ("queued", "refused", "failed", "malformed")
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class SocketMetrics:
    """The local socket's instruments (docs/gateway.md, "The local socket"): requests by kind and
    outcome, refusals by reason, and each group commit's size and duration. Kind labels are the
    envelope's kinds (``OTHER`` for anything else), reasons the registry's codes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from pipeline.envelope import Kind

        ns = "fleet_gateway_socket"
        self._kinds = frozenset(k.value for k in Kind)
        self._children: dict[tuple[object, str], Counter] = {}
        self.requests = Counter(
            f"{ns}_requests_total",
            "Requests on the local socket, by message kind and outcome (queued: committed; "
            "refused: answered with its reason; failed: the group's commit failed; malformed).",
            ["kind", "outcome"],
            registry=registry,
        )
        for outcome in SOCKET_OUTCOMES:
            self.requests.labels(Kind.SEND.value, outcome)
        self.refusals = Counter(
            f"{ns}_refusals_total",
            "Requests on the local socket refused, by reason code.",
            ["reason"],
            registry=registry,
        )
        self.group_size = Histogram(
            f"{ns}_group_size",
            "Requests committed in one transaction by the socket's writer (group commit).",
            buckets=_GROUP_BUCKETS,
            registry=registry,
        )
        self.commit_seconds = Histogram(
            f"{ns}_commit_seconds",
            "Time of one group commit (checks, rows, COMMIT) by the socket's writer.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )

    def request(self, kind: object, outcome: str, reason: str | None = None) -> None:
        # the labelled children, looked up once per (kind, outcome): labels() costs a lock and
        # a dict lookup on every call, on the send path
        child = self._children.get((kind, outcome))
        if child is None:
            child = self._child(kind, outcome)
        child.inc()
        if reason is not None:
            self.refusals.labels(reason if reasons.known(reason) else reasons.OTHER).inc()

    def _child(self, kind: object, outcome: str) -> Counter:
        """The child of ``(kind, outcome)``, kept under the value as given (a :class:`Kind`, a
        string): bounded, as the values given are kinds or op names (a kind no envelope has is
        counted as ``OTHER`` but not kept, so a client's made-up kinds cannot grow it)."""
        label = reasons.label(str(kind), self._kinds)
        child = self._children.get((label, outcome))
        if child is None:
            child = self._children[(label, outcome)] = self.requests.labels(label, outcome)
        if label == str(kind):
            self._children[(kind, outcome)] = child
        return child
