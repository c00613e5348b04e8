"""The least-privilege plan for a gateway login: what it reads, what it writes, what it never gets."""

from __future__ import annotations

from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.kafka.acls import Operation, Pattern, Resource, binding, gateway_grants
from pipeline.kafka.topics import TopicNames


def reads(host: str) -> set[tuple[Resource, str, Pattern]]:
    return {
        (g.resource, g.name, g.pattern)
        for g in gateway_grants(host)
        if g.operation is Operation.READ
    }


def test_a_gateway_reads_only_its_own_inbox_control_and_group() -> None:
    assert reads("a") == {
        (Resource.TOPIC, "fleet.inbox.a", Pattern.LITERAL),
        (Resource.TOPIC, "fleet.control.a", Pattern.LITERAL),
        (Resource.TOPIC, "fleet.roster", Pattern.LITERAL),
        (Resource.GROUP, "fleet.gw.a", Pattern.LITERAL),
        (Resource.GROUP, "fleet.roster-reader.", Pattern.PREFIXED),
    }
    assert all(g.principal == "User:a" for g in gateway_grants("a"))


def test_a_gateway_writes_inboxes_control_roster_and_dlq_and_nothing_else() -> None:
    writes = {(g.name, g.pattern) for g in gateway_grants("a") if g.operation is Operation.WRITE}
    assert writes == {
        ("fleet.inbox.", Pattern.PREFIXED),
        ("fleet.control.", Pattern.PREFIXED),
        ("fleet.roster", Pattern.LITERAL),
        ("fleet.dlq", Pattern.LITERAL),
    }
    ops = {g.operation for g in gateway_grants("a")}
    assert Operation.IDEMPOTENT_WRITE in ops
    assert not {"CREATE", "DELETE", "ALTER", "ALL"} & {o.value for o in ops}


def test_the_prefix_is_followed_and_bindings_convert() -> None:
    grants = gateway_grants("a", TopicNames(prefix="t1."))
    assert all(g.name.startswith("t1.") or g.resource is Resource.CLUSTER for g in grants)
    assert [str(binding(g).name) for g in grants] == [g.name for g in grants]


def test_fleet_acls_plan_prints_the_set() -> None:
    result = CliRunner().invoke(app, ["acls", "plan", "--host", "a"])
    assert result.exit_code == 0, result.output
    assert "ALLOW User:a READ TOPIC fleet.inbox.a (literal)" in result.output
    assert "fleet.inbox.b" not in result.output
