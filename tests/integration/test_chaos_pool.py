"""The worker-pool checker catches a planted pool bug ("a checker that has
never failed proves nothing"; catalogue numbers 5, 6 and 17 run through ``fleet chaos run``).

R-POOL-3 (commit after processing): a worker commits its offset only AFTER the batch's transaction (effect
row + dedupe row). Planted in one real ``fleet pool run`` member (``FLEET_FAULT=
plant_commit_first``, ``pipeline/hooks.py``): its offsets commit BEFORE the transaction and it
dies in between; a supervisor restarts it. The records whose offsets moved past them are never
redelivered, so after heal-and-drain the pool checker must report them lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.chaos.checker import Violation
from pipeline.chaos.pool_faults import run_pool_planted
from pipeline.testing import BrokerHandle

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_pool_checker_catches_offsets_committed_before_the_effect(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    verdict, restarts = run_pool_planted(
        bootstrap=kafka.bootstrap, root=tmp_path, duration_s=8.0, drain_timeout_s=15.0
    )
    assert restarts >= 1, "the planted fault fired (the member died in the bug's window)"
    assert verdict.sends >= 40, verdict
    assert verdict.count(Violation.LOST) >= 1, verdict.findings[:5]
    assert not verdict.ok
