"""Callback injector, the factory and the injection metrics (no I/O)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from pipeline.errors import ConfigError, FleetError, InjectError
from pipeline.gateway.injectors import (
    INJECT_REASONS,
    CallbackInjector,
    CommandInjector,
    InjectMetrics,
    MeteredInjector,
    TmuxInjector,
    build_injector,
)
from pipeline.host.entity_config import InjectorSpec

ARGS = {"gid": "w1", "msg_id": "m-1", "kind": "SEND", "sender": "A-main", "body": b"hello"}


def test_callback_receives_the_envelope_fields() -> None:
    seen: list[dict[str, object]] = []
    CallbackInjector(lambda **kw: seen.append(kw)).inject(**ARGS)  # type: ignore[arg-type]
    assert seen == [ARGS]


def test_callback_exception_becomes_final_inject_failed() -> None:
    """Forward path is at-most-once (R-ACK-6): a raising callback is not retried blindly."""

    def boom(**_: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(InjectError) as info:
        CallbackInjector(boom).inject(**ARGS)  # type: ignore[arg-type]
    err = info.value
    assert (err.reason, err.retriable) == ("INJECT_FAILED", False)
    assert isinstance(err, FleetError) and "disk full" in str(err)
    assert err.context["msg_id"] == "m-1"


def test_callback_may_report_busy_itself() -> None:
    def busy(**_: object) -> None:
        raise InjectError("busy", reason="TARGET_BUSY", retriable=True)

    with pytest.raises(InjectError) as info:
        CallbackInjector(busy).inject(**ARGS)  # type: ignore[arg-type]
    assert (info.value.reason, info.value.retriable) == ("TARGET_BUSY", True)


def test_build_injector_for_each_type() -> None:
    def fn(**_: object) -> None:
        return None

    assert isinstance(
        build_injector(InjectorSpec(type="callback", callback="f"), {"f": fn}), CallbackInjector
    )
    command = build_injector(InjectorSpec(type="command", command=("cat", "-"), timeout_s=2))
    assert (
        isinstance(command, CommandInjector)
        and command.argv == ("cat", "-")
        and command.timeout_s == 2
    )
    tmux = build_injector(InjectorSpec(type="tmux", pane="%1", idle_pattern="^> $", socket="s1"))
    assert isinstance(tmux, TmuxInjector) and tmux.base == ("tmux", "-L", "s1")
    assert tmux.idle_pattern is not None and tmux.idle_pattern.pattern == "^> $"


def test_unregistered_callback_fails_at_build_time() -> None:
    with pytest.raises(ConfigError) as info:
        build_injector(InjectorSpec(type="callback", callback="missing"), {"other": print})
    assert info.value.reason == "CONFIG_UNKNOWN_CALLBACK"
    assert "missing" in str(info.value) and "other" in str(info.value)


def test_metered_injector_counts_failures_by_bounded_reason_and_times_successes() -> None:
    registry = CollectorRegistry()
    metrics = InjectMetrics(registry)
    outcomes: list[Exception | None] = [
        None,
        InjectError("busy", reason="TARGET_BUSY", retriable=True),
        InjectError("odd", reason="SOMETHING_NEW"),
        ValueError("bug"),
    ]

    def fn(**_: object) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    ticks = iter([10.0, 10.25, 0, 0, 0])
    metered = MeteredInjector(
        CallbackInjector(fn), metrics, injector="callback", clock=lambda: next(ticks)
    )
    metered.inject(**ARGS)  # type: ignore[arg-type]
    # The callback wrapper turns the ValueError into INJECT_FAILED before the meter sees it.
    for expected in ("TARGET_BUSY", "SOMETHING_NEW", "INJECT_FAILED"):
        with pytest.raises(InjectError) as info:
            metered.inject(**ARGS)  # type: ignore[arg-type]
        assert info.value.reason == expected

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("fleet_gateway_inject_seconds_count", injector="callback") == 1
    assert sample("fleet_gateway_inject_seconds_sum", injector="callback") == 0.25
    assert (
        sample("fleet_gateway_inject_failures_total", injector="callback", reason="TARGET_BUSY")
        == 1
    )
    # SOMETHING_NEW passes through the callback as InjectError; the label set stays closed.
    assert sample("fleet_gateway_inject_failures_total", injector="callback", reason="OTHER") == 1
    assert (
        sample("fleet_gateway_inject_failures_total", injector="callback", reason="INJECT_FAILED")
        == 1
    )
    assert (
        sample("fleet_gateway_inject_failures_total", injector="tmux", reason="INJECT_TIMEOUT") == 0
    )
    reasons = {
        s.labels["reason"] for m in registry.collect() for s in m.samples if "reason" in s.labels
    }
    assert reasons == {*INJECT_REASONS, "OTHER"}


def test_long_lived_mode_is_a_command_spec_key_and_builds_the_long_lived_injector() -> None:
    from pipeline.errors import ConfigError
    from pipeline.gateway.injectors import LongLivedCommandInjector, build_injector
    from pipeline.host.entity_config import InjectorSpec

    spec = InjectorSpec(type="command", command=("agent-child",), mode="long-lived")
    assert isinstance(build_injector(spec), LongLivedCommandInjector)
    one_shot = build_injector(InjectorSpec(type="command", command=("true",)))
    assert type(one_shot).__name__ == "CommandInjector"  # the default stays one-shot
    with pytest.raises(ConfigError, match="does not apply"):
        InjectorSpec(type="tmux", pane="%1", mode="long-lived")
    with pytest.raises(ConfigError, match="one-shot, long-lived"):
        InjectorSpec(type="command", command=("x",), mode="forever")  # type: ignore[arg-type]


def test_frames_round_trip_and_a_broken_answer_is_a_frame_error() -> None:
    import io

    from pipeline.gateway.injectors import framing

    body = b"\x00any bytes\n{not json}"
    stream = io.BytesIO(
        framing.request(msg_id="m-1", sender="A-main", to="B-w1", kind="SEND", body=body) * 2
    )
    first = framing.read_brief(stream)
    assert first == framing.Brief("m-1", "A-main", "B-w1", "SEND", body)
    assert framing.read_brief(stream) == first and framing.read_brief(stream) is None
    assert framing.parse_answer(framing.answer("m-1", "retry")) == framing.Answer("m-1", "retry")
    for junk in (b"hello\n", b"[]\n", b'{"msgId": "m-1", "status": "maybe"}\n'):
        with pytest.raises(framing.FrameError):
            framing.parse_answer(junk)
    with pytest.raises(framing.FrameError, match="cut short"):
        framing.read_brief(
            io.BytesIO(b'{"msgId":"m","from":"a","to":"b","kind":"SEND","length":9}\nab')
        )
