"""A clean stop runs in order (docs/gateway.md, "A clean stop"): every loop but the ``last``
ones, then the quiesce hooks (the inject workers end their burst), then the ``last`` loops (the
relay's last pass ships what all of them committed), then the stop hooks."""

from __future__ import annotations

import threading

from pipeline.gateway.service import Gateway, Supervised


def _loop(name: str, events: list[str], lock: threading.Lock) -> Supervised:
    def body(stop: threading.Event) -> None:
        stop.wait()
        with lock:
            events.append(f"{name} ended")

    return Supervised(name, body, last=name == "relay")


def test_the_last_loop_ends_after_the_others_and_the_quiesce_hooks() -> None:
    """R-ACK-5: the receipts a stop's last injects commit are shipped by the relay's last pass,
    so the relay stops after the inbox and after the inject workers ended."""
    events: list[str] = []
    lock = threading.Lock()
    gateway = Gateway(
        host="a", loops=[_loop(n, events, lock) for n in ("relay", "inbox", "socket")]
    )
    gateway.on_quiesce.append(lambda: events.append("inject workers ended"))
    gateway.on_stop.append(lambda: events.append("stop hooks"))
    gateway.start()
    gateway.stop(timeout=10)
    assert sorted(events[:2]) == ["inbox ended", "socket ended"]
    assert events[2:] == ["inject workers ended", "relay ended", "stop hooks"]


def test_a_loop_that_does_not_watch_its_stop_is_woken_right_after_its_stop_is_set() -> None:
    """A loop blocked on something else than its stop event (the relay's commit watch on a file
    descriptor, the relay's idle wait of up to a second) gets its ``wake`` right after its own
    stop is set: the inbox's stop does not wake the relay, the relay's does."""
    order: list[str] = []
    woken = {"watch": threading.Event(), "relay": threading.Event()}

    def blocked(name: str, stop_of: str) -> Supervised:
        def body(stop: threading.Event) -> None:
            assert woken[name].wait(60), f"{name} was never woken"
            order.append(f"{name} woken, its stop {'set' if stop.is_set() else 'NOT set'}")

        def wake() -> None:
            woken[name].set()

        return Supervised(name, body, last=stop_of == "last", wake=wake)

    gateway = Gateway(host="a", loops=[blocked("relay", "last"), blocked("watch", "first")])
    gateway.on_quiesce.append(lambda: order.append("quiesce"))
    gateway.start()
    gateway.stop(timeout=60)
    assert order == ["watch woken, its stop set", "quiesce", "relay woken, its stop set"]


def test_a_fatal_error_in_a_last_loop_still_stops_the_gateway() -> None:
    """A ``last`` loop waits on its own event, but its fatal error sets the gateway's stop."""

    def body(_stop: threading.Event) -> None:
        from pipeline.errors import FencedError

        raise FencedError("fenced")

    gateway = Gateway(host="a", loops=[Supervised("relay", body, last=True)]).start()
    assert gateway.stop_event.wait(10), "the fatal error stopped the gateway"
    assert str(gateway.fatal) and not gateway.last_stop.is_set()
    gateway.stop(timeout=10)
    assert gateway.last_stop.is_set()


def test_the_relays_last_pass_is_bounded_and_never_raises() -> None:
    """The last pass starts no batch after its budget (a broker away at the stop must not hold
    the stop); a failure in it is logged, its rows stay pending for the next start."""
    from pipeline.errors import BrokerError
    from pipeline.outbox.supervision import last_pass

    def waits_for_its_stop(stop: threading.Event) -> int:
        assert stop.wait(10), "the budget set the pass's stop"
        return 3

    def fails(_stop: threading.Event) -> int:
        raise BrokerError("broker away")

    assert last_pass(waits_for_its_stop, budget_s=0.05) == 3
    assert last_pass(fails, budget_s=1.0) == 0
    assert last_pass(waits_for_its_stop, budget_s=0) == 0  # off: no pass at all


def test_a_loop_whose_request_lost_its_login_restarts_and_a_refused_login_stops() -> None:
    """A re-authentication race (KIP-368) fails a loop's request with librdkafka's bare
    ``_AUTHENTICATION``: the loop restarts, the gateway runs on. A login the broker refused
    reaches the gateway through its login watch (``fail``), and that stops it."""
    from confluent_kafka import KafkaError, KafkaException

    from pipeline.errors import SecurityError

    runs: list[int] = []
    restarted = threading.Event()

    def body(stop: threading.Event) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise KafkaException(KafkaError(KafkaError._AUTHENTICATION))
        restarted.set()
        stop.wait()

    loop = Supervised("roster", body, backoff_s=0.01)
    gateway = Gateway(host="a", loops=[loop]).start()
    try:
        restarted.wait(10)
        assert gateway.fatal is None, f"it stopped on the lost login: {gateway.fatal}"
        assert len(runs) == 2 and loop.crashes == 1 and not gateway.stop_event.is_set()
        gateway.fail(SecurityError("Kafka refused the login User:a after start"))
        assert gateway.stop_event.wait(10)
        assert isinstance(gateway.fatal, SecurityError)
    finally:
        gateway.stop(timeout=10)
