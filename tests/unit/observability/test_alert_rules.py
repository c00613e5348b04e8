"""The shipped alert rules: valid, unit-tested with promtool, and naming only known metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.observability import METRICS

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
# metrics other processes export (gateway, relay): the names they must use, see the docs
EXTERNAL = {
    "fleet_gateway_injected_timeouts_total",  # gateway (expected; alert FleetInjectedTimeouts)
    # already in the tree (pipeline/runtime/metrics.py, pipeline/gateway/injectors/metrics.py)
    "fleet_consumer_records_total",
    "fleet_consumer_rebalances_total",
    "fleet_dedupe_hits_total",
    "fleet_consumer_commit_failures_total",
    "fleet_gateway_inject_seconds_bucket",
    "fleet_gateway_inject_failures_total",
    "fleet_gateway_held_oldest_age_seconds",  # gateway nudger (alert FleetMainNotDraining)
    "fleet_gateway_nudges_total",
    "fleet_store_wal_checkpoint_failures_total",  # gateway (alert FleetWalCheckpointFailing)
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool missing: install the Debian 'prometheus' package (scripts/install-system-deps.sh)"
        )
    return found


def test_promtool_check_rules() -> None:
    proc = subprocess.run(
        [promtool(), "check", "rules", str(RULES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    proc = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yml"],
        cwd=RULES.parent,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_rules_only_name_metrics_that_exist_and_are_documented() -> None:
    used = set(re.findall(r"\bfleet_[a-z_]+\b", RULES.read_text()))
    assert used, "no fleet_ metrics in the rules?"
    assert used <= set(METRICS) | EXTERNAL, used - set(METRICS) - EXTERNAL
    docs = (REPO / "docs" / "observability.md").read_text()
    missing = [name for name in sorted(set(METRICS) | EXTERNAL) if f"`{name}`" not in docs]
    assert not missing, f"undocumented metrics: {missing}"


def test_every_alert_has_a_runbook_section() -> None:
    alerts = re.findall(r"- alert: (\w+)", RULES.read_text())
    docs = (REPO / "docs" / "observability.md").read_text()
    assert len(alerts) >= 10
    for name in alerts:
        assert f"### {name}" in docs, name
        assert f"#{name.lower()}" in RULES.read_text()


def test_dashboard_queries_are_valid_promql_on_known_metrics(tmp_path: Path) -> None:
    import json

    dash = json.loads((REPO / "deploy" / "grafana" / "fleet-lag.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 12
    used = set(re.findall(r"\bfleet_[a-z_]+\b", " ".join(exprs)))
    assert used <= set(METRICS) | EXTERNAL, used - set(METRICS) - EXTERNAL
    # promtool has no offline query linter; a rules file of recording rules is parsed the same way
    rules = "groups:\n  - name: dashboard\n    rules:\n" + "".join(
        f"      - record: dashboard:q{i}\n        expr: {json.dumps(e.replace('$group', '.*'))}\n"
        for i, e in enumerate(exprs)
    )
    (tmp_path / "dash.yml").write_text(rules)
    proc = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "dash.yml")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_example_prometheus_config_is_valid_and_names_the_contract_jobs() -> None:
    config = RULES.parent / "prometheus.yml"
    proc = subprocess.run(
        [promtool(), "check", "config", str(config)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = config.read_text()
    for job in re.findall(r'up\{job="([\w-]+)"\}', RULES.read_text()):
        assert f"job_name: {job}" in text, job
