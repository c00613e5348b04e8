"""One batch's working state, from the first decision to the commit (see ``loop.py``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.record import Record

from .lanes import TP
from .staging import Staged

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """What a batch staged, how far each partition got, and which partitions a retry blocked."""

    staged: Staged = field(default_factory=Staged)
    next_offset: dict[TP, int] = field(default_factory=dict)
    first_offset: dict[TP, int] = field(default_factory=dict)
    blocked: dict[TP, tuple[int, float]] = field(default_factory=dict)  # tp -> (offset, delay)
    applied_ids: set[str] = field(default_factory=set)
    quarantined: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)
    records: Sequence[Record] = ()  # what process() was given (a retry hands some back)

    def count(self, outcome: str, n: int = 1) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + n


class KeepQuarantined(Exception):
    """A released record failed transiently again: roll the release's transaction back."""


def effect_failed() -> None:
    log.exception("after-commit effect failed")
