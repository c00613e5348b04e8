"""The OpenTelemetry Collector the trace tests use is real and reads what a span exporter sends.

It is the project's own build of the collector (tools/otelcol); when the Go toolchain is absent
it is not built and these tests skip, saying so (CI builds it in `make setup`).
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from pipeline.testing.otel_collector import OtelCollector, find_binary, wait_for_spans

pytestmark = pytest.mark.skipif(
    find_binary() is None, reason="no fleet-otelcol: scripts/build-otelcol.sh needs Go"
)

TRACE = "5b8efff798038103d269b633813fc60c"


def _export(endpoint: str, spans: list[dict[str, object]]) -> None:
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "gw-a"}}]
                },
                "scopeSpans": [{"spans": spans}],
            }
        ]
    }
    request = urllib.request.Request(
        f"{endpoint}/v1/traces",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def test_collector_keeps_trace_ids_and_parent_links() -> None:
    parent = {
        "traceId": TRACE,
        "spanId": "eee19b7ec3c1b174",
        "name": "fleet.send",
        "kind": 4,
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        "attributes": [{"key": "messaging.message.id", "value": {"stringValue": "m-1"}}],
    }
    child = {
        "traceId": TRACE,
        "spanId": "aaa19b7ec3c1b174",
        "parentSpanId": "eee19b7ec3c1b174",
        "name": "fleet.outbox.commit",
        "kind": 1,
        "startTimeUnixNano": "2",
        "endTimeUnixNano": "3",
    }
    with OtelCollector() as collector:
        _export(collector.endpoint, [parent, child])
        spans = wait_for_spans(collector, lambda s: len(s) >= 2)
    by_name = {s.name: s for s in spans}
    assert set(by_name) == {"fleet.send", "fleet.outbox.commit"}
    assert by_name["fleet.outbox.commit"].parent_span_id == by_name["fleet.send"].span_id
    assert {s.trace_id for s in spans} == {TRACE}
    assert by_name["fleet.send"].service == "gw-a"
    assert by_name["fleet.send"].attributes == {"messaging.message.id": "m-1"}
