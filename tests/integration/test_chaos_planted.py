"""The chaos checker catches planted bugs ("a checker that has never failed
proves nothing").

Each bug is one ordering the requirements forbid, planted in a real gateway process through a test-only
hook (``FLEET_FAULT=plant_*`` -> ``pipeline.hooks.Hooks``), with the crash inside the window it
opens; the real two-host workload runs over the shared broker, a supervisor restarts the dead
gateway, and after heal-and-drain the checker must report the loss:

* R-ACK-2 (at-least-once): the offset is committed only AFTER the transaction
  (planted: committed before it);
* R-ACK-8 (effectively once: the dedupe row in the handler's own transaction) (planted:
  the dedupe rows in a transaction of their own);
* R-OUT-4 (ack only what the broker accepted) (planted: outbox rows marked sent before the
  delivery report).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.chaos.planted import PLANTS, run_planted
from pipeline.testing import BrokerHandle

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_the_checker_catches_a_planted_bug(kafka: BrokerHandle, tmp_path: Path, name: str) -> None:
    plant = PLANTS[name]
    verdict, restarts = run_planted(
        plant, bootstrap=kafka.bootstrap, root=tmp_path, duration_s=8.0, drain_timeout_s=15.0
    )
    assert restarts >= 1, "the planted fault fired (the gateway died in the bug's window)"
    assert verdict.sends >= 40, verdict
    assert verdict.count(plant.catches) >= 1, (plant.bug, verdict.findings[:5])
    assert not verdict.ok
