"""The collector's OTLP/JSON lines are read back into spans with typed attributes."""

from __future__ import annotations

import json

from pipeline.testing.otel_collector import parse_otlp_json

TRACE = "5b8efff798038103d269b633813fc60c"


def test_parse_otlp_json_reads_typed_attribute_values() -> None:
    line = json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {},
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": TRACE.upper(),
                                    "spanId": "01",
                                    "name": "n",
                                    "attributes": [
                                        {"key": "i", "value": {"intValue": "7"}},
                                        {"key": "b", "value": {"boolValue": True}},
                                        {
                                            "key": "a",
                                            "value": {
                                                "arrayValue": {"values": [{"stringValue": "x"}]}
                                            },
                                        },
                                    ],
                                }
                            ]
                        }
                    ],
                }
            ]
        }
    )
    (span,) = parse_otlp_json(line)
    assert span.trace_id == TRACE and span.parent_span_id == ""
    assert span.attributes == {"i": 7, "b": True, "a": ["x"]}
