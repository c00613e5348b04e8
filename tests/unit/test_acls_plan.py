"""The least-privilege plans per role: what each login reads, writes, and never gets."""

from __future__ import annotations

from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.kafka.acls import (
    CLUSTER_NAME,
    Grant,
    Operation,
    Pattern,
    Resource,
    Role,
    binding,
    gateway_grants,
    role_grants,
)
from pipeline.kafka.topics import DLQ_SCAN_GROUP_PREFIX, TopicNames


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
        (Resource.TOPIC, "fleet.jobs", Pattern.LITERAL),  # the job ledger (R-FAIL-8)
        (Resource.GROUP, "fleet.gw.a", Pattern.LITERAL),
        (Resource.GROUP, "fleet.roster-reader.", Pattern.PREFIXED),
        (Resource.GROUP, "fleet.jobs-reader.", Pattern.PREFIXED),
    }
    assert all(g.principal == "User:a" for g in gateway_grants("a"))


def test_a_gateway_writes_inboxes_control_roster_and_dlq_and_nothing_else() -> None:
    writes = {(g.name, g.pattern) for g in gateway_grants("a") if g.operation is Operation.WRITE}
    assert writes == {
        ("fleet.inbox.", Pattern.PREFIXED),
        ("fleet.control.", Pattern.PREFIXED),
        ("fleet.roster", Pattern.LITERAL),
        ("fleet.jobs", Pattern.LITERAL),  # admission claims and releases
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


def ops_on(grants: tuple[Grant, ...]) -> set[tuple[Resource, str, Pattern, Operation]]:
    return {(g.resource, g.name, g.pattern, g.operation) for g in grants}


T, G, C = Resource.TOPIC, Resource.GROUP, Resource.CLUSTER
LIT, PRE = Pattern.LITERAL, Pattern.PREFIXED
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE


def test_the_reporter_reads_the_dlq_in_its_group_and_writes_only_inboxes() -> None:
    assert ops_on(role_grants(Role.REPORTER, "reporter")) == {
        (T, "fleet.dlq", LIT, R),
        (T, "fleet.dlq", LIT, D),
        (G, "fleet.dlq-reporter", LIT, R),
        (G, "fleet.dlq-reporter", LIT, D),
        (T, "fleet.inbox.", PRE, W),
        (T, "fleet.inbox.", PRE, D),
        (C, "kafka-cluster", LIT, Operation.IDEMPOTENT_WRITE),
    }


def test_the_exporter_describes_and_reads_offsets_but_reads_no_record() -> None:
    grants = role_grants(Role.EXPORTER, "exporter")
    assert ops_on(grants) == {
        (T, "fleet.", PRE, D),
        (T, "fleet.", PRE, Operation.DESCRIBE_CONFIGS),
        (G, "fleet.", PRE, D),
    }
    assert not {R, W, Operation.IDEMPOTENT_WRITE} & {g.operation for g in grants}


def test_the_dlq_owner_reads_the_dlq_and_replays_but_reads_no_inbox() -> None:
    grants = role_grants(Role.DLQ_OWNER, "owner")
    reads = {(g.resource, g.name) for g in grants if g.operation is R}
    assert reads == {(T, "fleet.dlq"), (G, DLQ_SCAN_GROUP_PREFIX)}
    writes = {g.name for g in grants if g.operation is W}
    assert writes == {"fleet.inbox.", "fleet.control.", "fleet.pool."}  # replay targets
    assert all(g.principal == "User:owner" for g in grants)


def test_the_narrow_roles_are_subsets_in_spirit_no_create_delete_alter() -> None:
    for role in Role:
        pool = "p" if role is Role.POOL else None
        grants = role_grants(role, "x", TopicNames(prefix="t1."), pool=pool)
        ops = {g.operation.value for g in grants}
        assert not {"CREATE", "DELETE", "ALTER", "ALL"} & ops, role
        names = {g.name for g in grants}
        assert all(
            n.startswith("t1.") or n in {CLUSTER_NAME, DLQ_SCAN_GROUP_PREFIX} for n in names
        ), role
    assert role_grants(Role.GATEWAY, "a") == gateway_grants("a")


def test_fleet_acls_plan_role_prints_the_narrow_set() -> None:
    result = CliRunner().invoke(app, ["acls", "plan", "--role", "exporter", "--login", "exp"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "ALLOW User:exp DESCRIBE TOPIC fleet. (prefixed)",
        "ALLOW User:exp DESCRIBE_CONFIGS TOPIC fleet. (prefixed)",
        "ALLOW User:exp DESCRIBE GROUP fleet. (prefixed)",
    ]
    bad = CliRunner().invoke(app, ["acls", "plan", "--role", "admin", "--host", "a"])
    assert bad.exit_code != 0


def test_a_pool_member_reads_its_pool_only_and_writes_only_the_dlq() -> None:
    """R-SEC-2: a worker-pool member's login (``--role pool --pool P``) reads pool.P in group
    pool.P, writes the DLQ, and is given nothing on another pool, an inbox or a control topic."""
    grants = role_grants(Role.POOL, "w", TopicNames(prefix="t."), pool="render")
    by_op = {(g.resource, g.name, g.pattern, g.operation) for g in grants}
    lit = Pattern.LITERAL
    assert {(r, n) for r, n, _p, op in by_op if op is Operation.READ} == {
        (Resource.TOPIC, "t.pool.render"),
        (Resource.GROUP, "t.pool.render"),
    }
    assert {(r, n) for r, n, _p, op in by_op if op is Operation.WRITE} == {
        (Resource.TOPIC, "t.dlq")
    }
    assert all(p is lit for _r, _n, p, _op in by_op)  # no prefix: no other pool
    assert (Resource.CLUSTER, CLUSTER_NAME, lit, Operation.IDEMPOTENT_WRITE) in by_op
    assert not [g for g in grants if "inbox" in g.name or "control" in g.name]


def test_the_pool_role_needs_its_pool_and_no_other_role_takes_one() -> None:
    import pytest

    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError):
        role_grants(Role.POOL, "w")
    with pytest.raises(ConfigError):
        role_grants(Role.GATEWAY, "a", pool="render")
    planned = CliRunner().invoke(app, ["acls", "plan", "--role", "pool", "--login", "w",
                                       "--pool", "render"])  # fmt: skip
    assert planned.exit_code == 0, planned.output
    assert "ALLOW User:w READ TOPIC fleet.pool.render (literal)" in planned.output
    refused = CliRunner().invoke(app, ["acls", "plan", "--role", "pool", "--login", "w"])
    assert refused.exit_code == 1 and "CONFIG_INVALID" in refused.output
