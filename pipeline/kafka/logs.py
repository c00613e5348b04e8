"""librdkafka's own log lines, routed into Python logging and de-duplicated.

Left to itself, librdkafka writes every failed reconnect to stderr: during a broker outage each
client logs ``Connect to ... failed: Connection refused`` many times a second, thousands of lines
a minute per gateway. Every client config (``pipeline.kafka.settings``) passes
:data:`LIBRDKAFKA_LOG` as its ``logger``; :class:`RepeatFilter` lets the first of a kind through
(kind = the line with its numbers blanked: ports, millisecond counts, client numbers) and then
at most one line per ``summary_s`` saying how many identical lines it held back. An outage of
any length thus adds a bounded number of lines per kind.
"""

from __future__ import annotations

import logging
import re
import threading
import time

_DIGITS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Pass the first line of each kind, then one summary per ``summary_s`` per kind."""

    def __init__(self, summary_s: float = 300.0, max_kinds: int = 1000) -> None:
        super().__init__()
        self.summary_s = summary_s
        self.max_kinds = max_kinds
        self._seen: dict[str, tuple[float, int]] = {}  # kind -> (last passed at, held back)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _DIGITS.sub("N", record.getMessage())
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(kind)
            if last is None or now - last[0] >= self.summary_s:
                if len(self._seen) >= self.max_kinds:
                    self._seen.clear()  # bounded memory; at worst a kind is logged again
                held = 0 if last is None else last[1]
                self._seen[kind] = (now, 0)
                if held:
                    record.msg = f"{record.getMessage()} ({held} identical lines held back)"
                    record.args = None
                return True
            self._seen[kind] = (last[0], last[1] + 1)
            return False


LIBRDKAFKA_LOG = logging.getLogger("pipeline.kafka.librdkafka")
LIBRDKAFKA_LOG.addFilter(RepeatFilter())


class ClientLog:
    """One client's ``logger``: forwards to :data:`LIBRDKAFKA_LOG` and remembers when the client
    last timed out its own group session (``SESSTMOUT``).

    With static membership, librdkafka answers a session timeout by re-joining under a new
    member id, which fences the id it still holds: the next heartbeat or commit then fails with
    ``FENCED_INSTANCE_ID``, fatally, although no other member exists (librdkafka issue #3437;
    seen after a whole-cluster outage). The runtime tells that self-fencing from a real second
    member by asking :meth:`timed_out_within` when it is fenced.
    """

    def __init__(self) -> None:
        self._session_timeout_at: float | None = None

    def log(self, level: int, fmt: str, *args: object) -> None:
        # confluent-kafka calls log(level, "%s [%s] %s", facility, client name, line)
        if args and args[0] == "SESSTMOUT":
            self._session_timeout_at = time.monotonic()
        LIBRDKAFKA_LOG.log(level, fmt, *args)

    def timed_out_within(self, window_s: float) -> bool:
        """Whether the client timed out its session in the last ``window_s``; forgets it, so one
        session timeout excuses at most one fencing."""
        at, self._session_timeout_at = self._session_timeout_at, None
        return at is not None and time.monotonic() - at <= window_s
