"""Helpers for tests on a secured local broker (``fleet kafka up --secure``): logins, the
operator's topology and ACLs (as ``admin``), a gateway config with its login."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from typer.testing import CliRunner

from pipeline.bootstrap.client import Factories
from pipeline.cli.main import app
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.local import LocalCluster
from pipeline.kafka.local.secure import ADMIN
from pipeline.kafka.security import KafkaSecurity
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.support.waiting import wait_until
from tests.integration.fleet_hosts import Fleet


def login(cluster: LocalCluster, user: str) -> KafkaSecurity:
    assert cluster.secure is not None
    return cluster.secure.security(user)


def login_file(cluster: LocalCluster, user: str) -> Path:
    assert cluster.secure is not None
    return cluster.secure.folder / f"{user}.kafka.toml"


def passwords(cluster: LocalCluster) -> list[str]:
    assert cluster.secure is not None
    return [cluster.secure.password(u).reveal() for u in cluster.secure.users]


def admin_factories(cluster: LocalCluster) -> Factories:
    return Factories().secured(login(cluster, ADMIN))


def topology(cluster: LocalCluster, names: TopicNames, hosts: tuple[str, ...], **kw: Any) -> None:
    """The operator's ``fleet topics apply`` as ``admin``: a gateway creates no topic."""
    spec = TopologySpec(hosts=hosts, topics=names, **kw)
    apply_topology(cluster.bootstrap_servers, spec, admin_factory=admin_factories(cluster).admin)


def acls(cluster: LocalCluster, role: str, user: str, prefix: str, *extra: str) -> None:
    """``fleet acls apply --role`` as the admin login (the operator's path)."""
    args = ["acls", "apply", "--role", role, "--login", user, "--prefix", prefix, *extra]
    args += ["--bootstrap", cluster.bootstrap_servers]
    args += ["--kafka-config", str(login_file(cluster, ADMIN))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"User:{user} ({role})" in result.output


def gateway_config(
    cluster: LocalCluster,
    fleet: Fleet,
    root: Path,
    host: str,
    *entities: EntityConfig,
    **kw: Any,
) -> GatewayConfig:
    """Host ``host``'s gateway under its own login (the login's name is the host id)."""
    settings: dict[str, Any] = {
        "inject_deadline_s": 30,
        "presence_interval_s": 1.0,
        "presence_ttl_s": 30.0,
        "sweep_interval_s": 0.5,
        **kw,
    }
    return GatewayConfig(
        host=host,
        bootstrap=cluster.bootstrap_servers,
        store_url=f"sqlite:///{root / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        entities=entities,
        kafka=login(cluster, host),
        **settings,
    )


COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def commit_once(consumer: Any, position: TopicPartition) -> None:
    """Commit ``position``; a fresh broker's coordinator may still be loading (retriable)."""

    def attempt() -> bool:
        try:
            consumer.commit(offsets=[position], asynchronous=False)
            return True
        except KafkaException as exc:
            err = exc.args[0]
            if not (err.retriable() or err.code() in COORDINATOR_NOT_READY):
                raise
            return False

    wait_until(attempt, timeout_s=60, what="the group coordinator to take a commit", interval_s=0.5)
