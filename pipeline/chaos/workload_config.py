"""The chaos workload's settings: where it runs, how fast and how long it sends, and its bounds
(start-up, drain, the quiet window). Frozen; the runner builds it from ``fleet chaos run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    bootstrap: str
    root: Path
    rate_per_s: float = 10.0
    duration_s: float = 20.0
    inject_deadline_s: float = 30.0  # the default: faults here last less
    # an ASK's turn expires (FAILED EXPIRED to the asker) after this: past a slow restart on a
    # loaded machine (a clean one took 43 s here), inside the drain bound (an ASK whose record
    # was lost to retention ends with its expiry before the drain gives up)
    ask_ttl_s: float = 60.0
    presence_ttl_s: float = 30.0
    ready_timeout_s: float = 90.0
    drain_timeout_s: float = 90.0
    quiet_s: float = 3.0  # a last redelivery window: duplicates would show up now
