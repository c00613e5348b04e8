"""The options every long-running command shares (``pipeline/cli/serving.py``): ``--retention
KEY=VALUE`` is checked like fleet.toml's ``[retention]`` (R-EFF-4 horizons included), and
each long-running command offers the metrics and purge options."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.cli.serving import retention_from
from pipeline.errors import ConfigError
from pipeline.reasons import Config, Retention
from pipeline.retention import RetentionConfig


def test_pairs_override_the_base_and_keep_its_other_keys() -> None:
    base = RetentionConfig(held_drained_s=60)
    got = retention_from(["outbox_sent_s=3600", "batch_rows=7"], base=base)
    assert got is not None
    assert (got.outbox_sent_s, got.batch_rows, got.held_drained_s) == (3600.0, 7, 60)
    assert isinstance(got.batch_rows, int)
    assert retention_from(None) == RetentionConfig()
    assert retention_from(["every_s=1"], no_purge=True) is None


@pytest.mark.parametrize(
    ("pair", "reason"),
    [
        ("dedup_s=1", Config.CONFIG_UNKNOWN_KEY),
        ("outbox_sent_s", Config.CONFIG_INVALID),
        ("outbox_sent_s=soon", Config.CONFIG_INVALID),
        ("batch_rows=0", Config.CONFIG_INVALID),
        ("dedupe_s=86400", Retention.DEDUPE_HORIZON_TOO_SHORT),
        ("sagas_finished_s=86400", Retention.SAGA_HORIZON_TOO_SHORT),
    ],
)
def test_bad_pairs_are_refused_with_their_reason(pair: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        retention_from([pair])
    assert err.value.reason == reason


@pytest.mark.parametrize(
    "command", [("relay", "run"), ("pool", "run"), ("dlq", "report"), ("gateway", "run")]
)
def test_long_running_commands_serve_metrics_and_purge(command: tuple[str, str]) -> None:
    result = CliRunner().invoke(
        app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    )
    assert result.exit_code == 0, result.output
    assert "--metrics-port" in result.output and "--metrics-address" in result.output
    if command != ("gateway", "run"):  # the gateway reads [retention] from its fleet.toml
        assert "--retention" in result.output and "--no-purge" in result.output
