"""Facts about other processes, asked of the kernel."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (one we may not signal counts: it is alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
