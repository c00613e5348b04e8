"""A short seeded chaos pass through ``fleet chaos run``, inside ``make test``.

Scenario kill9-pull checks R-ACK-2 (reply path: hold + dedupe in one transaction, then
commit) and R-ACK-3 (forward path: ack before inject, a lost inject answered by one FAILED) under
kill -9 of host B at seeded random points; clean-restart checks R-ACK-2, R-ACK-3 under an orderly
SIGTERM and restart: no duplicates and no FAILED at all. The workload's mix also carries ASK/ANSWER
(R-CONV-3: each ASK ends once), broadcasts (R-TOP-6: each member holds one once) and run steps
(R-OUT-3: per (BranchKey, Lsn) applied in order, without gaps). The full catalogue with more
repetitions is ``make chaos``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.chaos.checker import Violation, check
from pipeline.chaos.history import Op, read_history
from pipeline.testing import BrokerHandle

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_a_short_seeded_pass_finds_no_violation_and_the_checker_sees_a_planted_one(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "chaos", "run", "--scenario", "kill9-pull",
         "--scenario", "clean-restart", "--repeat", "1", "--seed", "1", "--duration", "12",
         "--bootstrap", kafka.bootstrap, "--dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    report = json.loads(out.stdout)
    rows = {r["scenario"]: r for r in report["scenarios"]}
    assert out.returncode == 0, (out.stdout, out.stderr[-3000:])
    for name in ("kill9-pull", "clean-restart"):
        r = rows[name]
        assert r["repetitions"] == 1 and r["ok"], r
        assert r["faults"] >= 1, r
        assert r["sends"] >= 60, r
        # the whole mix ran: conversations, broadcasts and run steps were checked too
        assert r["asks"] >= 5 and r["broadcasts"] >= 5 and r["run_steps"] >= 10, r
        assert (r["lost"], r["duplicated"], r["out_of_order"]) == (0, 0, 0), r

    # The same real history, with one delivery removed and one repeated: the checker says so.
    history = list(read_history(Path(rows["kill9-pull"]["histories"][0])))
    held = [h for h in history if h["op"] == Op.HELD]
    assert held, "the history records what B held"
    dropped = [h for h in history if h is not held[0]]
    assert check(dropped).count(Violation.LOST) == 1
    assert check([*history, held[-1]]).count(Violation.DUPLICATED) == 1
