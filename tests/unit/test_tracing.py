"""The tracing seam (docs/observability.md, "Tracing"): span names, parent links across the
outbox and the broker, the envelope's traceId as the trace id, the OTEL_* rule, and a
``traceparent`` header the signature does not cover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pipeline import tracing
from pipeline.bootstrap.tracing import install_tracing
from pipeline.envelope import Kind, reasons
from pipeline.tracing import TRACING, TracingSettings, settings_from_env
from pipeline.tracing import names as n
from pipeline.tracing.ids import format_traceparent, parse_traceparent, trace_int
from tests.envelope_kit import Fleet


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    stop = install_tracing(TracingSettings(), host="b", exporter=exporter)
    try:
        yield exporter
    finally:
        stop()
    assert not TRACING.on


def by_name(exporter: InMemorySpanExporter) -> dict[str, object]:
    return {s.name: s for s in exporter.get_finished_spans()}


def test_header_names_match_the_envelope() -> None:
    assert (n.H_MSG_ID, n.H_KIND, n.H_TRACE_ID, n.H_TO) == (
        reasons.H_MSG_ID, reasons.H_KIND, reasons.H_TRACE_ID, reasons.H_TO
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "exporter"),
    [
        ({}, None),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, "otlp"),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
    ],
)
def test_the_otel_env_rule(env: dict[str, str], exporter: str | None) -> None:
    assert settings_from_env(env).exporter == exporter


def test_trace_ids_and_traceparent() -> None:
    minted = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_int(minted) == int(minted, 16)
    assert trace_int("my-run-7") == trace_int("my-run-7") != trace_int("my-run-8")
    assert trace_int("0" * 32) != 0
    tp = format_traceparent(int(minted, 16), 0x00F067AA0BA902B7)
    assert tp == b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert parse_traceparent(tp) == (int(minted, 16), 0x00F067AA0BA902B7, True)
    for bad in (None, b"", b"junk", b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01"):
        assert parse_traceparent(bad) is None


def test_a_send_is_one_trace_from_client_to_inject_and_receipt(
    spans: InMemorySpanExporter,
) -> None:
    """send -> outbox.commit -> relay.produce -> inbox.consume -> inject -> receipt.stage ->
    (the receipt's) outbox.commit, all in the envelope's traceId."""
    fleet = Fleet()
    brief = fleet.envelope(kind=Kind.SEND)
    rec = fleet.record(brief)
    stored = TRACING.staged(brief, rec["topic"], rec["headers"])
    published = TRACING.produced(rec["topic"], stored)
    TRACING.consumed(brief, rec["topic"], tuple(published))
    TRACING.injected(brief, "w-b", "injected", queued_at=0.0)
    receipt = fleet.envelope(kind=Kind.INJECTED, sender="b._gateway", to="w-a",
                             trace_id=brief.trace_id)  # fmt: skip
    TRACING.receipt(brief, receipt)
    TRACING.staged(receipt, "fleet.inbox.a", [])

    got = spans.get_finished_spans()
    assert [s.name for s in got] == [
        n.SEND, n.OUTBOX_COMMIT, n.RELAY_PRODUCE, n.INBOX_CONSUME, n.INJECT, n.RECEIPT_STAGE,
        n.OUTBOX_COMMIT,
    ]  # fmt: skip
    assert {s.context.trace_id for s in got} == {int(brief.trace_id, 16)}
    send, commit, produce, consume, inject, stage, receipt_commit = got
    assert send.parent is None
    assert commit.parent.span_id == send.context.span_id
    assert produce.parent.span_id == commit.context.span_id
    assert consume.parent.span_id == produce.context.span_id
    assert inject.parent.span_id == consume.context.span_id
    assert stage.parent.span_id == inject.context.span_id
    assert receipt_commit.parent.span_id == stage.context.span_id
    assert inject.attributes[n.INJECT_OUTCOME] == "injected"
    assert consume.attributes[n.MESSAGE_ID] == brief.msg_id
    assert consume.attributes[n.MESSAGING_SYSTEM] == "kafka"
    assert produce.attributes[n.DESTINATION] == rec["topic"]
    # the row stored the commit's traceparent; the relay published its own in its place
    assert dict(stored)[n.TRACEPARENT] == format_traceparent(commit.context.trace_id,
                                                             commit.context.span_id)  # fmt: skip
    assert dict(published)[n.TRACEPARENT] == format_traceparent(produce.context.trace_id,
                                                                produce.context.span_id)  # fmt: skip


def test_a_traceparent_of_another_trace_is_ignored(spans: InMemorySpanExporter) -> None:
    """The header is advisory: the signed traceId decides the trace."""
    fleet = Fleet()
    env = fleet.envelope()
    rec = fleet.record(env)
    liar = [*rec["headers"], (n.TRACEPARENT, format_traceparent(0xABC, 0xDEF))]
    TRACING.consumed(env, rec["topic"], tuple(liar))
    TRACING.held(env, "m-b")
    consume, hold = spans.get_finished_spans()
    assert consume.parent is None and consume.context.trace_id == int(env.trace_id, 16)
    assert hold.name == n.HOLD and hold.parent.span_id == consume.context.span_id


def test_a_gateway_reply_is_a_child_of_what_it_answers(spans: InMemorySpanExporter) -> None:
    """An event (the FAILED reporter, SPAWN / STOP) parents what its thread stages next in the
    same trace; a client's send in another trace starts at fleet.send."""
    fleet = Fleet()
    env = fleet.envelope()
    TRACING.event(n.FAILED_REPORT, trace_id=env.trace_id, msg_id=env.msg_id)
    failed = fleet.envelope(kind=Kind.FAILED, sender="b._gateway", to="w-a",
                            trace_id=env.trace_id)  # fmt: skip
    TRACING.staged(failed, "fleet.inbox.a", [])
    other = fleet.envelope()
    TRACING.staged(other, "fleet.inbox.b", [])
    report, commit, send, other_commit = spans.get_finished_spans()
    assert commit.parent.span_id == report.context.span_id
    assert send.name == n.SEND and send.context.trace_id == int(other.trace_id, 16)
    assert other_commit.parent.span_id == send.context.span_id


def test_the_signature_does_not_cover_traceparent() -> None:
    """A traceparent beside the signed headers verifies (old readers ignore unknown headers:
    the verifier reads the covered names only)."""
    fleet = Fleet()
    rec = fleet.record()
    headers = [*rec["headers"], (n.TRACEPARENT, format_traceparent(1, 2))]
    verified = fleet.verifier("b").verify(
        topic=rec["topic"], key=rec["key"], headers=headers, value=rec["value"]
    )
    assert verified.envelope.msg_id == dict(rec["headers"])[reasons.H_MSG_ID].decode()


def test_seam_off_refuses_a_hook_call() -> None:
    assert not TRACING.on
    with pytest.raises(RuntimeError):
        tracing.TRACING.held(Fleet().envelope(), "m-b")


def test_spans_reach_an_otlp_http_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's OTLP/HTTP exporter, as a gateway sets it up from OTEL_*, to the loopback
    receiver: names, the envelope's trace id, the parent link and service.name arrive."""
    from pipeline.testing.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver().start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        stop = install_tracing(settings_from_env({"OTEL_TRACES_EXPORTER": "otlp"}), host="a")
        fleet = Fleet()
        env = fleet.envelope()
        TRACING.staged(env, "fleet.inbox.b", [])
        stop()  # flushes the batch processor
        send, commit = sorted(receiver.spans(), key=lambda s: s.start_ns)
    finally:
        receiver.stop()
    assert (send.name, commit.name) == (n.SEND, n.OUTBOX_COMMIT)
    assert send.trace_id == commit.trace_id == env.trace_id
    assert commit.parent_span_id == send.span_id and send.parent_span_id == ""
    assert send.service == "a" and send.attributes[n.MESSAGE_ID] == env.msg_id
