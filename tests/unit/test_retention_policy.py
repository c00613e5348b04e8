"""The retention policy and the R-EFF-4 horizon rule: "key retention must cover the longest
period over which one event can be redelivered or replayed" (24 h keys under a 7-day topic let a
Worker paused 48 h repeat an effect)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.host.config import load_config
from pipeline.kafka.topology import TopologySpec
from pipeline.reasons import Config, Retention
from pipeline.retention import RetentionConfig
from pipeline.retention.policy import DLQ_RETENTION_S

DAY = 86_400.0


def test_defaults_cover_the_declared_topics() -> None:
    policy = RetentionConfig()
    assert policy.dedupe_s >= policy.inbox_topic_s + policy.replay_window_s
    assert policy.inbox_retention_ms == TopologySpec(hosts=()).inbox_retention_ms
    assert policy.failed_reported_s >= TopologySpec(hosts=()).dlq_retention_ms / 1000
    assert TopologySpec(hosts=()).dlq_retention_ms == DLQ_RETENTION_S * 1000


def test_seed_001_numbers_are_refused() -> None:
    """R-EFF-4: 24 h of dedupe under a 7-day inbox is refused, with the window in the context."""
    with pytest.raises(ConfigError) as err:
        RetentionConfig(dedupe_s=DAY, inbox_topic_s=7 * DAY, replay_window_s=DAY)
    assert err.value.reason == Retention.DEDUPE_HORIZON_TOO_SHORT
    assert err.value.context["horizon_s"] == 8 * DAY
    assert "retention.dedupe_s" in str(err.value)


def test_the_horizon_is_inclusive_and_counts_the_replay_window() -> None:
    RetentionConfig(dedupe_s=15, inbox_topic_s=10, replay_window_s=5)  # exactly covers: fine
    with pytest.raises(ConfigError) as err:
        RetentionConfig(dedupe_s=14.9, inbox_topic_s=10, replay_window_s=5)
    assert err.value.reason == Retention.DEDUPE_HORIZON_TOO_SHORT


def test_reporter_rows_must_outlive_the_dlq() -> None:
    """A replayed dead letter must find its reporter row: one FAILED per original, ever."""
    with pytest.raises(ConfigError) as err:
        RetentionConfig(failed_reported_s=7 * DAY)
    assert err.value.reason == Retention.REPORTED_HORIZON_TOO_SHORT


def test_saga_rows_must_outlive_the_saga_topics() -> None:
    """A finished saga's row makes a redelivered reply stale: kept shorter than the saga topics'
    retention + the replay window, a late reply would find no saga (the R-EFF-4 horizon)."""
    with pytest.raises(ConfigError) as err:
        RetentionConfig(sagas_finished_s=7 * 86400, saga_topic_s=7 * 86400, replay_window_s=3600)
    assert err.value.reason == Retention.SAGA_HORIZON_TOO_SHORT
    assert err.value.context["horizon_s"] == 7 * 86400 + 3600


@pytest.mark.parametrize(
    ("key", "value"),
    [("held_drained_s", 0), ("outbox_sent_s", -1), ("batch_rows", 0), ("every_s", True)],
)
def test_bad_values_are_config_invalid(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        RetentionConfig(**{key: value})  # type: ignore[arg-type]
    assert err.value.reason == Config.CONFIG_INVALID


def _toml(tmp_path: Path, retention: str) -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(f'host = "h1"\n\n[retention]\n{retention}\n')
    return path


def test_fleet_toml_retention_table_is_read(tmp_path: Path) -> None:
    cfg = load_config(
        _toml(
            tmp_path,
            "held_drained_s = 60\ninbox_topic_s = 3600\nreplay_window_s = 600\ndedupe_s = 4200\n",
        )
    )
    assert cfg.retention.held_drained_s == 60
    assert cfg.retention.inbox_retention_ms == 3_600_000
    assert cfg.retention.outbox_sent_s == RetentionConfig().outbox_sent_s


def test_fleet_toml_too_short_horizon_names_file_and_key(tmp_path: Path) -> None:
    path = _toml(tmp_path, "dedupe_s = 86400\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert err.value.reason == Retention.DEDUPE_HORIZON_TOO_SHORT
    assert err.value.context["key"] == "retention.dedupe_s"
    assert str(path) in str(err.value)


def test_fleet_toml_unknown_retention_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_toml(tmp_path, "dedup_s = 1\n"))
    assert err.value.reason == Config.CONFIG_UNKNOWN_KEY
