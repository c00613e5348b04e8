"""The README's run command (``make run`` = ``fleet demo``) as a user runs it: a subprocess on a
real broker, bounded in time. It must finish its conversation and print no raw librdkafka line
(``%3|...|FAIL|...``): those are routed through Python logging (``pipeline.kafka.logs``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pipeline.testing import BrokerHandle

pytestmark = pytest.mark.kafka

RAW_LIBRDKAFKA = re.compile(r"^%\d\|\d", re.MULTILINE)  # librdkafka's own stderr format


def test_fleet_demo_runs_and_prints_no_raw_librdkafka_line(kafka: BrokerHandle) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "demo", "--bootstrap", kafka.bootstrap, "--briefs", "2"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "worker-b" in proc.stdout and "injected" in proc.stdout, proc.stdout[-2000:]
    raw = RAW_LIBRDKAFKA.findall(output)
    assert not raw, [line for line in output.splitlines() if RAW_LIBRDKAFKA.match(line)][:5]
