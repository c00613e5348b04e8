"""Key classes and their published retention (R-EFF-4: a key has an expiry; publish it).

R-EFF-4's numbers are the rule enforced here: a key store that keeps keys 24 h under a
topic that keeps events 7 days lets a Worker paused for 48 h replay events whose keys have
expired, so the effect runs again. "Key retention must cover the longest period over which one
event can be redelivered or replayed": a class whose retention is shorter than its replay window
is refused when it is built, with ``IDEM_RETENTION_SHORTER_THAN_REPLAY``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pipeline.errors import ConfigError
from pipeline.reasons import Idempotency
from pipeline.retention.policy import covers  # one rule for keys, dedupe and reporter rows

FOREVER: float | None = None  # retention_s / replay_window_s: no expiry (topic retention.ms=-1)


@dataclass(frozen=True, kw_only=True)
class KeyClass:
    """One family of keys with its retention.

    ``retention_s`` -- how long a key (and its stored result) is kept; ``None`` keeps it forever.
    ``replay_window_s`` -- the longest time over which one event can come back: the source
    topic's ``retention.ms`` (a replay from the start), or longer if offsets can be reset
    further; ``None`` when the topic keeps events forever.
    ``lease_s`` -- how long an in-progress reservation is honoured (409) before another caller may
    take it over, presuming the holder died between reserving and completing.
    """

    name: str
    retention_s: float | None
    replay_window_s: float | None
    lease_s: float = 300.0

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 64:
            raise ConfigError(
                f"key class name must be 1..64 characters: {self.name!r}",
                reason=Idempotency.IDEM_KEY_INVALID,
            )
        if self.lease_s <= 0:
            raise ConfigError(f"key class {self.name!r}: lease_s must be > 0")
        if not covers(self.retention_s, self.replay_window_s):
            raise ConfigError(
                f"key class {self.name!r}: keys kept {_fmt(self.retention_s)} but events can be "
                f"replayed for {_fmt(self.replay_window_s)}; a replay after the keys expire would "
                "repeat the effect (R-EFF-4: 24 h keys under a 7-day topic). Keep keys at least "
                "as long as the replay window.",
                reason=Idempotency.IDEM_RETENTION_SHORTER_THAN_REPLAY,
                context={
                    "key_class": self.name,
                    "retention_s": self.retention_s,
                    "replay_window_s": self.replay_window_s,
                },
            )

    @classmethod
    def for_topic(
        cls,
        name: str,
        *,
        retention_s: float | None,
        topic_retention_ms: int,
        lease_s: float = 300.0,
    ) -> KeyClass:
        """A class whose replay window is a topic's ``retention.ms`` (``-1``: forever)."""
        window = None if topic_retention_ms < 0 else topic_retention_ms / 1000.0
        return cls(name=name, retention_s=retention_s, replay_window_s=window, lease_s=lease_s)


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "forever"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    return f"{seconds:g} s"


def class_map(classes: Iterable[KeyClass]) -> Mapping[str, KeyClass]:
    out: dict[str, KeyClass] = {}
    for kc in classes:
        if kc.name in out:
            raise ConfigError(f"key class {kc.name!r} is declared twice")
        out[kc.name] = kc
    return out
