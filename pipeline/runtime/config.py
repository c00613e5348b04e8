"""One consumer-group member's settings: what the runtime loop (``loop.py``) is built from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.kafka.settings import OffsetReset

from .retry import BackoffPolicy


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """One consumer-group member: group, topics, static id, dedupe scope, batch, retry."""

    bootstrap: str
    group_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    scope: str | None = None  # dedupe/quarantine scope; defaults to the group id
    dedupe_header: str | None = "msgId"  # None: no dedupe rows at all (an experiment knob)
    ordered: bool = True  # spent retries quarantine the key (True) or just dead-letter (False)
    batch_size: int = 500
    poll_timeout_s: float = 0.05
    retry: BackoffPolicy = field(default_factory=BackoffPolicy)
    offset_reset: OffsetReset = OffsetReset.EARLIEST
    release_check_s: float = 1.0
    consumer_overrides: Mapping[str, Any] = field(default_factory=dict)
    # an at-most-once batch's commit goes asynchronously and its effects wait for the answer
    # while the loop goes on (``awaiting_commit.py``); False: the loop waits on a synchronous one
    pipelined_commit: bool = False

    @property
    def dedupe_scope(self) -> str:
        return self.scope or self.group_id
