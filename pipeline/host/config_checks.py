"""Value checks the host's config objects share: names, numbers, strings, lists.

Each raises the :class:`~pipeline.errors.ConfigError` of :func:`pipeline.support.binder.config_error`
(``CONFIG_INVALID`` unless said otherwise), naming the key and the bad value; the value objects
call them from ``__post_init__``, so a config built in code is held to the same rules as a file.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.errors import ConfigError
from pipeline.kafka.names import check_name
from pipeline.reasons import Config
from pipeline.support.binder import config_error

# A gid is a Kafka record key and a roster key. Dots separate words but never precede "_", so a
# gid cannot collide with the gateway's own roster key ``<host>._gateway``; ``broadcast.`` keys
# carry group broadcasts, so that prefix is reserved.
_GID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?=[A-Za-z0-9])){0,127}$")


def check_gid(value: Any, *, key: str = "gid") -> str:
    """Global ids: letters, digits, '-', '_', single dots between words; max 128 chars."""
    if not isinstance(value, str) or not _GID.match(value) or value.startswith("broadcast."):
        raise config_error(
            key,
            value,
            "a gid uses letters, digits, '-', '_' and dots between words (max 128), "
            "and does not start with 'broadcast.'",
            Config.INVALID_NAME,
        )
    return value


def checked_name(value: Any, key: str, what: str) -> str:
    """A host id, group or profile name in the safe charset (``INVALID_NAME`` otherwise)."""
    if not isinstance(value, str):
        raise config_error(key, value, f"{what} must be a string")
    try:
        return check_name(value, what=what)
    except ConfigError as exc:
        raise config_error(key, value, str(exc.args[0]), exc.reason) from None


def check_number(value: Any, key: str, *, minimum: float = 0.0, strict: bool = True) -> None:
    """A number above ``minimum`` (or at it, unless ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise config_error(key, value, "must be a number")
    if value < minimum or (strict and value == minimum):
        raise config_error(key, value, f"must be {'>' if strict else '>='} {minimum:g}")


def check_text(value: Any, key: str, *, optional: bool = False) -> None:
    """A non-empty string without surrounding spaces (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, str) or not value or any(c.isspace() for c in value[:1] + value[-1:]):
        raise config_error(key, value, "must be a non-empty string without surrounding spaces")


def checked_strings(value: Any, key: str) -> tuple[str, ...]:
    """A tuple of non-empty strings."""
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        raise config_error(key, value, "must be a list of non-empty strings")
    return value
