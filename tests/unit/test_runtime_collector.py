"""The collector's young generation is sized above a batch, and never made smaller."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pipeline.runtime.collector import YOUNG_THRESHOLD, size_for_batches


@pytest.fixture
def threshold() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_young_generation_is_raised_above_a_batch(threshold: None) -> None:
    gc.set_threshold(700, 10, 10)
    size_for_batches()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)


def test_a_higher_threshold_or_a_collector_switched_off_is_left_alone(threshold: None) -> None:
    gc.set_threshold(YOUNG_THRESHOLD * 2, 5, 5)
    size_for_batches()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 5, 5)
    gc.set_threshold(0, 10, 10)
    size_for_batches()
    assert gc.get_threshold() == (0, 10, 10)
