"""The safe charset of a topic-name part (host ids, pool names, groups), without the topic table.

Its own module so that the gateway's config loader -- on the path of every ``fleet send``
(one process per message) -- checks names without building :class:`.topics.TopicNames`.
"""

from __future__ import annotations

import re

from pipeline.errors import ConfigError
from pipeline.reasons import Config

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,100}$")


def check_name(value: str, *, what: str) -> str:
    """Host ids, pool names and the like become topic-name parts: keep them to a safe charset."""
    if not _NAME.match(value):
        raise ConfigError(
            f"invalid {what} {value!r}: use letters, digits, '-' or '_' (max 101 chars)",
            reason=Config.INVALID_NAME,
        )
    return value
