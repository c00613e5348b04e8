"""Every ``fleet_*`` metric the alert rules and the dashboard read is exported by some process.

The names are collected from the real instrument classes built on fresh registries (gateway,
relay, failure handling) and from the exporter's collector rendering a full sample, so renaming
an instrument without updating a rule fails here rather than as a silently blind alert.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from pipeline.failures.metrics import FailureMetrics
from pipeline.gateway.injectors.metrics import InjectMetrics
from pipeline.gateway.metrics import GatewayMetrics, SocketMetrics
from pipeline.observability import LagCollector, LagSampler, SamplerConfig
from pipeline.observability.wal_checkpoints import register_wal_checkpoints
from pipeline.outbox.metrics import OutboxMetrics
from pipeline.runtime.metrics import RuntimeMetrics

from .fakes import FixedStore
from .test_sampler import NOW, fleet

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "fleet-lag.json"
NAME = re.compile(r"\bfleet_[a-z0-9_]+\b")


# series names a family of each type is scraped as (a labelled family with no child yet has
# no samples, but its series appear with the first increment)
SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
}


def _names(registry: CollectorRegistry) -> set[str]:
    """Series names as scraped (``_total``, ``_bucket``, ``_count``... included)."""
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        names.update(s.name for s in family.samples)
    return names


def exported_by_process() -> dict[str, set[str]]:
    gateway = CollectorRegistry()
    GatewayMetrics(gateway)
    SocketMetrics(gateway)
    InjectMetrics(gateway)
    RuntimeMetrics(gateway)
    register_wal_checkpoints(gateway)
    relay = CollectorRegistry()
    OutboxMetrics(relay)
    failures = CollectorRegistry()
    FailureMetrics(failures)
    exporter = CollectorRegistry()
    sampler = LagSampler(
        fleet(1, 1, 1),
        SamplerConfig(dlq_topic="fleet.dlq"),
        store=FixedStore(),
        clock=lambda: NOW,
    )
    sampler.sample()
    LagCollector(lambda: sampler.latest, lambda: sampler.cycles).register(exporter)
    registries = {"gateway": gateway, "relay": relay, "failures": failures, "exporter": exporter}
    return {process: _names(registry) for process, registry in registries.items()}


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    targets = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    variables = [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return targets + variables


def test_every_metric_in_the_alert_rules_is_exported() -> None:
    exported = set().union(*exported_by_process().values())
    used = set(NAME.findall(RULES.read_text()))
    assert len(used) >= 10
    assert used <= exported, f"rules read metrics nobody exports: {sorted(used - exported)}"


def test_every_metric_on_the_dashboard_is_exported() -> None:
    exported = set().union(*exported_by_process().values())
    used = set(NAME.findall(" ".join(_dashboard_exprs())))
    assert len(used) >= 15
    assert used <= exported, f"dashboard reads metrics nobody exports: {sorted(used - exported)}"


def test_gauges_exported_by_two_processes_are_not_double_counted() -> None:
    """The exporter (--store-url) and the relay both export the outbox gauges: a ``sum`` over
    them must pick one job, and alerts must aggregate the jobs away (one alert, not two)."""
    by = exported_by_process()
    shared = {
        name
        for name in by["exporter"]
        if any(name in names for process, names in by.items() if process != "exporter")
    }
    assert shared == {"fleet_outbox_backlog_rows", "fleet_outbox_oldest_unsent_age_seconds"}
    for expr in _dashboard_exprs():
        for name in shared & set(NAME.findall(expr)):
            assert f"sum({name})" not in expr.replace(" ", ""), expr
    rules = RULES.read_text()
    for name in shared:
        for line in (ln for ln in rules.splitlines() if "expr:" in ln and name in ln):
            assert "without (job, instance)" in line or 'job="fleet-exporter"' in line, line


def test_every_process_with_metrics_has_a_scrape_job_and_a_port_option() -> None:
    from typer.testing import CliRunner

    from pipeline.cli.main import app

    config = (RULES.parent / "prometheus.yml").read_text()
    docs = (REPO / "docs" / "observability.md").read_text()
    for job in ("fleet-exporter", "fleet-gateway", "fleet-relay"):
        assert f"job_name: {job}" in config, job
        assert f"| `{job}` |" in docs, job
    runner = CliRunner()
    for args, option in (
        (["gateway", "run", "--help"], "--metrics-port"),
        (["relay", "run", "--help"], "--metrics-port"),
        (["exporter", "--help"], "--store-url"),
    ):
        result = runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 0, result.output
        assert option in result.output, (args, result.output)
