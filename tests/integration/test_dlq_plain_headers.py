"""A dead letter's context in plain-text headers beside the Avro one (R-DLQ-1: a DLQ carries
its error context), read back with a plain consumer that knows nothing of our schema -- and
with kcat, as docs/failures.md's recipe does -- on the real broker."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pipeline.failures import dlq_ops
from pipeline.failures.dlq import DLQ_HEADER
from tests.conftest import kcat_refusal

from .dlq_helpers import dead_letter_all, produce_originals, read_all

pytestmark = pytest.mark.kafka


def test_plain_headers_say_reason_and_origin_to_any_consumer(kafka, new_topic) -> None:
    source, dlq = new_topic("src"), new_topic("dlq")
    produce_originals(kafka.bootstrap, source, 2, 1, kind=b"SEND")
    error = "RETRIES_EXHAUSTED after 5 attempts: ValueError: no brief in body"
    originals = dead_letter_all(
        kafka.bootstrap, source, dlq, 2, reason="RETRIES_EXHAUSTED", error=error
    )
    raw = read_all(kafka.bootstrap, dlq, 2)
    assert len(raw) == 2
    for msg, original in zip(sorted(raw, key=lambda m: m.offset()), originals, strict=True):
        headers = [(k, bytes(v)) for k, v in msg.headers()]
        names = [k for k, _ in headers]
        # the original's headers first, verbatim; then the Avro context; then the plain copy
        assert headers[: len(original.headers())] == list(original.headers())
        assert names[len(original.headers())] == DLQ_HEADER
        plain = {k: v.decode() for k, v in headers[len(original.headers()) + 1 :]}
        assert plain == {
            "fleet.dlq.reason": "RETRIES_EXHAUSTED",
            "fleet.dlq.original.topic": source,
            "fleet.dlq.original.partition": str(original.partition()),
            "fleet.dlq.original.offset": str(original.offset()),
            "fleet.dlq.original.timestamp": str(original.timestamp()[1]),
            "fleet.dlq.exception.class": "ValueError",
            "fleet.dlq.exception.message": error,
            "fleet.dlq.attempts": "5",
            "fleet.dlq.gateway": "h1",
            "fleet.dlq.group": "g1",
        }
    # our own reader still sees the original headers only, the context from the Avro header
    views = sorted(dlq_ops.scan(kafka.bootstrap, dlq), key=lambda v: v.dlq_offset)
    assert [v.headers for v in views] == [list(m.headers()) for m in originals]
    assert [v.context["offset"] for v in views] == [m.offset() for m in originals]

    kcat = shutil.which("kcat")
    if kcat is None or kcat_refusal() is not None:
        # the recipe's tool is not installed here (scripts/install-system-deps.sh has it), or
        # it cannot log in to a cluster the suite did not start (tests/conftest.py says why)
        return
    shown = subprocess.run(
        [kcat, "-C", "-b", kafka.bootstrap, "-t", dlq, "-o", "beginning", "-c", "1", "-e",
         "-f", "%h\\n"],
        capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert b"fleet.dlq.reason=RETRIES_EXHAUSTED" in shown, shown
    assert f"fleet.dlq.original.offset={originals[0].offset()}".encode() in shown, shown
