"""Wait until a condition holds, within a bound: the one polling loop of tests, benches, chaos.

``wait_until(condition, timeout_s=..., what=...)`` calls ``condition`` every ``interval_s``
until it returns something truthy and returns that value; past ``timeout_s`` it raises a
:class:`TimeoutError` that names ``what`` and the bound, so a failed wait says what never
happened. The condition is always asked once more at the deadline, so a slow machine that
reaches the deadline during a sleep still sees a condition that became true meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.1,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """The first truthy value of ``condition()``; :class:`TimeoutError` naming ``what`` after
    ``timeout_s``."""
    deadline = clock() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        sleep(min(interval_s, left))
