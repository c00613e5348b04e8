"""fleet.toml keys for hold and nudge: strict like every other key."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.host.config import config_from_mapping

MAIN = {"gid": "main-a", "role": "main", "delivery": "pull"}
WORKER = {"gid": "w", "role": "worker", "delivery": "inject", "injector": {"type": "command",
          "command": ["true"]}}  # fmt: skip


def test_a_pull_entity_takes_a_nudge_target_and_the_backoff_keys() -> None:
    cfg = config_from_mapping({
        "host": "A", "nudge_initial_s": 2, "nudge_max_s": 60,
        "entities": [MAIN | {"nudge": {"type": "tmux", "pane": "agents:main", "socket": "s1"}}],
    })  # fmt: skip
    nudge = cfg.entities[0].nudge
    assert nudge is not None and (nudge.type, nudge.pane, nudge.socket) == (
        "tmux",
        "agents:main",
        "s1",
    )
    assert (cfg.nudge_initial_s, cfg.nudge_max_s) == (2, 60)


def test_a_callback_nudge_is_named_by_gid_by_default() -> None:
    cfg = config_from_mapping({"host": "A", "entities": [MAIN | {"nudge": {"type": "callback"}}]})
    assert cfg.entities[0].nudge is not None and cfg.entities[0].nudge.callback == "main-a"


@pytest.mark.parametrize(
    ("data", "key", "reason"),
    [
        ({"entities": [WORKER | {"nudge": {"type": "callback"}}]}, "entities[0].nudge",
         "CONFIG_INVALID"),
        ({"entities": [MAIN | {"nudge": {"type": "tmux"}}]}, "entities[0].nudge.pane",
         "CONFIG_MISSING_KEY"),
        ({"entities": [MAIN | {"nudge": {"type": "tmux", "pane": "p", "bogus": 1}}]},
         "entities[0].nudge.bogus", "CONFIG_UNKNOWN_KEY"),
        ({"nudge_initial_s": 0}, "nudge_initial_s", "CONFIG_INVALID"),
        ({"nudge_initial_s": 10, "nudge_max_s": 5}, "nudge_max_s", "CONFIG_INVALID"),
    ],
)  # fmt: skip
def test_bad_nudge_settings_name_the_key_and_the_reason(
    data: dict[str, object], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping({"host": "A"} | data)
    assert info.value.reason == reason
    assert info.value.context["key"] == key
