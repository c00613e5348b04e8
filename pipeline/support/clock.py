"""The wall clock in epoch milliseconds: the one reading every timestamp of the fleet uses.

Envelope ``ts``/``expiresAt``, presence heartbeats, held rows, receipts and journals all stamp
``now_ms()``. It reads ``time.time_ns`` at each call (never a cached reference), so a process
whose wall clock is moved (the chaos suite's skew shim) moves every stamp with it.
Durations and deadlines inside one process use ``time.monotonic`` instead, never this.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch, by the wall clock."""
    return time.time_ns() // 1_000_000
