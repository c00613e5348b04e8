"""A record's retry state, carried in its partition's committed offset metadata.

A retried record blocks its partition, so the group's committed offset stays at (or below) it
while it is retried. The runtime commits its attempt count with that offset
(``fleet.retry:<offset>:<attempts>:<first_failure_ms>:<last_failure_ms>``), and a member that
is assigned the partition reads it back with the committed offset: the retry budget (R-RETRY-3,
R-FAIL-3: a retry limit with backoff) is the group's, not one owner's, so a poison
record whose partition moves while it is retried still ends in quarantine or the DLQ after the
configured attempts (the ``poison-rebalance`` chaos scenario found 9 and 13 attempts against a limit of 5). The next commit
past the record carries no mark: the state ends with the record. Nothing is stored anywhere
else; the metadata is bounded by the broker (``offset.metadata.max.bytes``, 4096 by default).
"""

from __future__ import annotations

import re

from pipeline.runtime.context import Tries

PREFIX = "fleet.retry:"
_MARK = re.compile(r"fleet\.retry:(\d{1,19}):(\d{1,9}):(\d{1,19}):(\d{1,19})")


def encode(offset: int, tries: Tries) -> str:
    return (
        f"{PREFIX}{offset}:{tries['attempts']}:{tries['first_failure_ms']}"
        f":{tries['last_failure_ms']}"
    )


def decode(metadata: str | None) -> tuple[int, Tries] | None:
    """``(offset, tries)`` from a mark; None for anything else (no mark, another tool's text)."""
    m = _MARK.fullmatch(metadata or "")
    if m is None:
        return None
    offset, attempts, first, last = (int(g) for g in m.groups())
    return offset, Tries(attempts=attempts, first_failure_ms=first, last_failure_ms=last)
