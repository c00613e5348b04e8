"""A real SASL_SSL broker (``fleet kafka up --secure``): logins, TLS and ACLs as stable reasons.

R-SEC-1 asks for a private broker over TLS with per-gateway logins; these tests start
one through the launcher and check that our clients (built by ``Factories.secured``, the one
path production uses) get through with the right login and are refused, fast and with a
reason, with a wrong one. Every test's output, the librdkafka log and the broker's own logs are
scanned for the passwords at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from typer.testing import CliRunner

from pipeline.bootstrap.client import Factories
from pipeline.bootstrap.gateway import build_gateway
from pipeline.cli.main import app
from pipeline.envelope import Kind
from pipeline.errors import FleetError, SecurityError
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.kafka.acls import apply_grants, gateway_grants
from pipeline.kafka.errors import as_fleet_error
from pipeline.kafka.local import LocalCluster
from pipeline.kafka.local.secure import ADMIN, make_tls
from pipeline.kafka.security import PLAINTEXT, KafkaSecurity, Secret
from pipeline.kafka.settings import admin_config, consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import TopologySpec, apply_topology
from pipeline.presence.roles import Delivery, Role
from pipeline.reasons import Security
from pipeline.support.waiting import wait_until
from pipeline.testing import unique_name
from tests.integration.fleet_hosts import Fleet

pytestmark = pytest.mark.kafka

_SEEN: list[str] = []  # every error text and log line the tests produced, scanned at the end


class _Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _SEEN.append(record.getMessage())


@pytest.fixture(scope="module")
def secure(secure_kafka: LocalCluster) -> Iterator[LocalCluster]:
    """The session's secured cluster (conftest), with this module's log lines kept."""
    handler = _Keep()
    logging.getLogger("pipeline").addHandler(handler)
    try:
        yield secure_kafka
    finally:
        logging.getLogger("pipeline").removeHandler(handler)


def login(cluster: LocalCluster, user: str) -> KafkaSecurity:
    assert cluster.secure is not None
    return cluster.secure.security(user)


def refusal(cluster: LocalCluster, security: KafkaSecurity) -> SecurityError:
    with pytest.raises(SecurityError) as exc:
        Factories().secured(security).check_access(cluster.bootstrap_servers, timeout_s=20)
    _SEEN.append(str(exc.value))
    return exc.value


def grant(cluster: LocalCluster, user: str, topic: str, group: str) -> None:
    admin = (
        Factories().secured(login(cluster, ADMIN)).admin(admin_config(cluster.bootstrap_servers))
    )
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)
    ]
    bindings.append(
        AclBinding(
            ResourceType.GROUP,
            group,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    for future in admin.create_acls(bindings).values():
        future.result(30)


def produce_one(cluster: LocalCluster, security: KafkaSecurity, topic: str) -> KafkaError | None:
    producer = Factories().secured(security).producer(producer_config(cluster.bootstrap_servers))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value=b"hello", key=b"k", on_delivery=lambda e, _m: outcome.append(e))
    producer.flush(30)
    assert outcome, "no delivery report within the flush bound"
    return outcome[0]


def test_a_host_login_produces_and_consumes_through_our_clients(secure: LocalCluster) -> None:
    """R-SEC-1: a gateway reaches the private broker over TLS with its own login."""
    topic, group = unique_name("sec-t"), unique_name("sec-g")
    grant(secure, "a", topic, group)
    a = login(secure, "a")
    Factories().secured(a).check_access(secure.bootstrap_servers)
    assert produce_one(secure, a, topic) is None
    consumer = Factories().secured(a).consumer(consumer_config(secure.bootstrap_servers, group))
    consumer.subscribe([topic])
    got = None
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg.value()
            break
    consumer.close()
    assert got == b"hello"


def test_a_wrong_password_is_auth_failed(secure: LocalCluster) -> None:
    wrong = replace(login(secure, "a"), sasl_password=Secret("not-the-password"))
    err = refusal(secure, wrong)
    assert err.reason == Security.AUTH_FAILED and not err.retriable
    assert err.context["principal"] == "User:a"


def test_an_unknown_login_is_auth_failed(secure: LocalCluster) -> None:
    stranger = replace(login(secure, "a"), sasl_username="mallory")
    assert refusal(secure, stranger).reason == Security.AUTH_FAILED


def test_a_plaintext_client_is_refused(secure: LocalCluster) -> None:
    err = refusal(secure, PLAINTEXT)
    assert err.reason == Security.PROTOCOL_MISMATCH
    assert "security_protocol" in str(err)


def test_a_client_trusting_another_ca_is_tls_failed(secure: LocalCluster, tmp_path: Path) -> None:
    make_tls(tmp_path)  # a CA that never signed this broker
    err = refusal(secure, replace(login(secure, "a"), ssl_ca_location=str(tmp_path / "ca.pem")))
    assert err.reason == Security.TLS_FAILED


def test_a_login_without_an_acl_is_not_authorized(secure: LocalCluster) -> None:
    """b has a login but no ACL on a's topic: the write is refused with the resource named."""
    topic, group = unique_name("sec-t"), unique_name("sec-g")
    grant(secure, "a", topic, group)
    error = produce_one(secure, login(secure, "b"), topic)
    assert error is not None
    err: FleetError = as_fleet_error(error, f"produce to {topic}")
    _SEEN.append(str(err))
    assert err.reason == Security.NOT_AUTHORIZED and not err.retriable
    assert err.context["resource_type"] == "topic"


def _gateway_config(
    secure: LocalCluster, fleet: Fleet, host: str, entity: EntityConfig, root: Path
) -> GatewayConfig:
    return GatewayConfig(
        host=host,
        bootstrap=secure.bootstrap_servers,
        store_url=f"sqlite:///{root / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        inject_deadline_s=10,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        entities=(entity,),
        kafka=login(secure, host),
    )


def test_two_gateways_with_their_logins_and_only_the_planned_acls(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """R-SEC-1, R-SEC-2: per-host logins over TLS and only the ACLs of
    ``fleet acls plan``; the forward path (send -> inject -> INJECTED) and the pull path
    (reply held, then pulled) and a failed inject's FAILED work; gateway a cannot read inbox.b
    nor join gw.b."""
    fleet = Fleet.create(tmp_path, secure.bootstrap_servers, ("a", "b"))
    names = TopicNames(prefix=fleet.prefix)
    admin = Factories().secured(login(secure, ADMIN))
    apply_topology(
        secure.bootstrap_servers,
        TopologySpec(hosts=("a", "b"), topics=names),
        admin_factory=admin.admin,
    )
    for host in ("a", "b"):
        apply_grants(
            admin.admin(admin_config(secure.bootstrap_servers)), gateway_grants(host, names)
        )
    injected: list[bytes] = []

    def worker(*, gid: str, msg_id: str, kind: str, sender: str, body: bytes) -> None:
        if body == b"boom":
            raise RuntimeError("the worker refuses this brief")
        injected.append(body)

    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    work = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    a = build_gateway(
        _gateway_config(secure, fleet, "a", main, tmp_path),
        signer=fleet.signers["a"],
        trust=fleet.trust,
    )
    b = build_gateway(
        _gateway_config(secure, fleet, "b", work, tmp_path),
        signer=fleet.signers["b"],
        trust=fleet.trust,
        callbacks={"worker-b": worker},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(
            lambda: a.client.knows("worker-b") and b.client.knows("main-a"),
            timeout_s=60,
            what="presence",
        )
        a.client.send(sender="main-a", to="worker-b", body=b"brief")
        wait_until(lambda: injected == [b"brief"], timeout_s=30, what="the inject on b")
        b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"done")
        got: list[Any] = []
        wait_until(
            lambda: got.extend(a.client.poll("main-a")) or len(got) >= 2,
            timeout_s=30,
            what="pull on a",
        )
        assert sorted(m.kind for m in got) == ["INJECTED", "REPLY"]
        # the FAILED flow: an inject that fails comes back to the sender as one FAILED
        a.client.send(sender="main-a", to="worker-b", body=b"boom")
        failed: list[Any] = []
        wait_until(
            lambda: (
                failed.extend(a.client.poll("main-a")) or any(m.kind == "FAILED" for m in failed)
            ),
            timeout_s=30,
            what="FAILED on a",
        )
        assert [m.kind for m in failed if m.kind != "FAILED"] == []
        assert a.gateway.stop_event.is_set() is False and b.gateway.stop_event.is_set() is False
    finally:
        a.gateway.stop()
        b.gateway.stop()

    # gateway a's login, the gateway's own consumer settings, b's inbox and group
    spy = (
        Factories()
        .secured(login(secure, "a"))
        .consumer(consumer_config(secure.bootstrap_servers, names.gateway_group("b")))
    )
    spy.subscribe([names.inbox("b")])
    refused: FleetError | None = None
    for _ in range(60):
        msg = spy.poll(0.5)
        if msg is not None and msg.error() is not None:
            refused = as_fleet_error(msg.error(), f"read {names.inbox('b')}")
            break
    spy.close()
    assert refused is not None, "a read b's inbox, or no refusal within the bound"
    _SEEN.append(str(refused))
    assert refused.reason == Security.NOT_AUTHORIZED
    assert refused.context["resource_type"] in ("topic", "group")


def test_fleet_acls_apply_creates_the_planned_set_as_admin(secure: LocalCluster) -> None:
    """``fleet topics apply`` and ``fleet acls apply`` log in with a [kafka] table file (the
    operator's ``admin``); applying the ACLs twice is a no-op."""
    assert secure.secure is not None
    prefix = unique_name("acl").replace(".", "") + "."
    args = ["acls", "apply", "--host", "a", "--prefix", prefix, "--bootstrap"]
    args += [
        secure.bootstrap_servers,
        "--kafka-config",
        str(secure.secure.folder / "admin.kafka.toml"),
    ]
    topics = ["topics", "apply", "--host", "a", "--prefix", prefix, "--bootstrap"]
    topics += [secure.bootstrap_servers, "--kafka-config", args[-1]]
    created = CliRunner().invoke(app, topics)
    assert created.exit_code == 0, created.output
    host_login = str(secure.secure.folder / "a.kafka.toml")
    refused = CliRunner().invoke(app, [*topics[:-1], host_login, "--host", "c"])
    _SEEN.append(refused.output)
    assert refused.exit_code != 0 and "NOT_AUTHORIZED" in refused.output  # a gateway creates none
    for _ in range(2):
        result = CliRunner().invoke(app, args)
        _SEEN.append(result.output)
        assert result.exit_code == 0, result.output
    planned = gateway_grants("a", TopicNames(prefix=prefix))
    assert f"{len(planned)} ACLs in place for User:a" in result.output
    admin = Factories().secured(login(secure, ADMIN)).admin(admin_config(secure.bootstrap_servers))
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            "User:a",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    mine = [b for b in found if b.name.startswith(prefix)]
    assert len(mine) == len([g for g in planned if g.name.startswith(prefix)])
    denied = CliRunner().invoke(
        app,
        [
            "acls",
            "apply",
            "--host",
            "b",
            "--prefix",
            prefix,
            "--bootstrap",
            secure.bootstrap_servers,
            "--kafka-config",
            str(secure.secure.folder / "a.kafka.toml"),
        ],
    )
    _SEEN.append(denied.output)
    assert denied.exit_code != 0 and "NOT_AUTHORIZED" in denied.output


def _java_properties(cluster: LocalCluster, folder: Path, user: str, password: str) -> Path:
    """A ``client.properties`` as a team writes it for ``kafka-console-consumer
    --command-config``: JAAS SCRAM login, PEM truststore."""
    assert cluster.secure is not None
    path = folder / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{user}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={cluster.secure.ca}\n"
    )
    return path


def test_a_java_client_properties_file_logs_in_with_scram(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """R-SEC-1 with the file a Kafka team already has: ``--command-config client.properties``
    (Java keys) logs the CLI in as ``admin`` over SASL_SSL/SCRAM-SHA-512; a wrong password in
    such a file is AUTH_FAILED (exit 1, refused), and the password never shows."""
    assert secure.secure is not None
    admin_pw = secure.secure.password(ADMIN).reveal()
    good = _java_properties(secure, tmp_path, ADMIN, admin_pw)
    prefix = unique_name("props").replace(".", "") + "."
    args = ["topics", "apply", "--host", "a", "--prefix", prefix, "-b", secure.bootstrap_servers]
    created = CliRunner().invoke(app, [*args, "--command-config", str(good)])
    _SEEN.append(created.output)
    assert created.exit_code == 0, created.output
    acl = ["acls", "apply", "--host", "a", "--prefix", prefix, "--bootstrap-server"]
    applied = CliRunner().invoke(
        app, [*acl, secure.bootstrap_servers, "--command-config", str(good), "-X", "client.id=ops"]
    )
    _SEEN.append(applied.output)
    assert applied.exit_code == 0, applied.output
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = _java_properties(secure, bad_dir, ADMIN, "not-the-password")
    refused = CliRunner().invoke(app, [*args, "--command-config", str(bad)])
    _SEEN.append(refused.output)
    assert refused.exit_code == 1 and "[AUTH_FAILED]" in refused.output
    inline = CliRunner().invoke(
        app, [*args, "--command-config", str(good), "-X", f"sasl.password={admin_pw}"]
    )
    _SEEN.append(inline.output)
    assert inline.exit_code == 1 and "[SECRET_INLINE]" in inline.output
    for out in (created.output, applied.output, refused.output, inline.output):
        assert admin_pw not in out


def test_zz_no_password_in_any_output(secure: LocalCluster) -> None:
    """Runs last in the module: the passwords appear in no captured line and no broker log."""
    assert secure.secure is not None
    passwords = [secure.secure.password(u).reveal() for u in secure.secure.users]
    texts = list(_SEEN)
    for node in secure.nodes:
        texts += [p.read_text(errors="replace") for p in (node.server_log, node.stdout_log)]
    texts.append(repr(secure.state()))
    assert len(texts) > 3
    for text in texts:
        for pw in passwords:
            assert pw not in text
