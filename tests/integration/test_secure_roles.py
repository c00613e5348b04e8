"""The narrow ACL roles on a real SASL_SSL broker: each login can do its job and no more.

``fleet acls apply --role`` (as the ``admin`` super user) gives the exporter and the FAILED
reporter their sets from :mod:`pipeline.kafka.acls`; the tests then run the production code
(``fleet lag``, ``fleet dlq report --relay``) with only those logins (their ``[kafka]`` tables:
``--kafka-config`` and the reporter's fleet.toml) and check what each is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from sqlalchemy import select
from typer.testing import CliRunner

from pipeline.bootstrap.client import Factories
from pipeline.bootstrap.gateway import build_gateway
from pipeline.cli.main import app
from pipeline.envelope.receipts import read_receipt
from pipeline.errors import FleetError
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.kafka.errors import as_fleet_error
from pipeline.kafka.local import LocalCluster
from pipeline.kafka.local.secure import ADMIN
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence.roles import Delivery, Role
from pipeline.reasons import Security
from pipeline.support.waiting import wait_until
from pipeline.testing import unique_name
from tests.integration.fleet_hosts import Fleet
from tests.integration.secure_logins import (
    acls,
    commit_once,
    login,
    login_file,
    passwords,
    topology,
)

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
# logins used here (conftest's SECURE_LOGINS): gateways a and b, reporter host r, exporter,
# DLQ owner


@pytest.fixture(scope="module")
def secure(secure_kafka: LocalCluster) -> LocalCluster:
    """The session's secured cluster (conftest)."""
    return secure_kafka


def test_the_exporter_login_reads_lag_but_cannot_consume_an_inbox(secure: LocalCluster) -> None:
    """The exporter's set is describe and offsets only. ``fleet lag`` with its login
    reports the gateway group's lag on inbox.a; a consumer with the same login that tries to
    read a record of inbox.a is refused NOT_AUTHORIZED (topic)."""
    prefix = unique_name("exp").replace(".", "") + "."
    names = TopicNames(prefix=prefix)
    topology(secure, names, ("a",), inbox_partitions=1)
    acls(secure, "exporter", "exporter", prefix)
    server, inbox, group = secure.bootstrap_servers, names.inbox("a"), names.gateway_group("a")
    admin = Factories().secured(login(secure, ADMIN))
    producer = admin.producer(producer_config(server))
    for i in range(3):
        producer.produce(inbox, value=b"secret body %d" % i, key=b"k")
    assert producer.flush(30) == 0
    committer = admin.consumer(consumer_config(server, group))
    commit_once(committer, TopicPartition(inbox, 0, 1))
    committer.close()

    args = ["lag", "--bootstrap", server, "--groups-prefix", prefix, "--json", "--window", "0"]
    result = CliRunner().invoke(app, [*args, "--kafka-config", str(login_file(secure, "exporter"))])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = [(r["group"], r["topic"], r["partition"]) for r in report["partitions"]]
    assert rows == [(group, inbox, 0)]
    (row,) = report["partitions"]
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (1, 3, 2)
    for pw in passwords(secure):
        assert pw not in result.output

    spy = (
        Factories()
        .secured(login(secure, "exporter"))
        .consumer(consumer_config(server, f"{prefix}exporter-spy"))
    )
    # a group under the prefix (DESCRIBE is granted: finding its coordinator is allowed) and
    # assign only (no commit, no offset fetch): what is refused is the topic READ itself
    spy.assign([TopicPartition(inbox, 0, 0)])
    refused: FleetError | None = None
    for _ in range(60):
        msg = spy.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is not None, "the exporter login read a record of inbox.a"
        refused = as_fleet_error(msg.error(), f"read {inbox}")
        break
    spy.close()
    assert refused is not None, "no refusal within the bound"
    assert refused.reason == Security.NOT_AUTHORIZED
    assert refused.context["resource_type"] == "topic"


def _gateway(
    secure: LocalCluster, fleet: Fleet, root: Path, host: str, entity: EntityConfig, **kw: Any
) -> GatewayConfig:
    return GatewayConfig(
        host=host,
        bootstrap=secure.bootstrap_servers,
        store_url=f"sqlite:///{root / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        inject_deadline_s=3600,  # a's own deadline never fires: the FAILED is the reporter's
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        entities=(entity,),
        kafka=login(secure, host),
        **kw,
    )


def held_failed(engine: Any) -> list[tuple[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(held_table.c.sender, held_table.c.body).where(
                held_table.c.recipient == "main-a", held_table.c.kind == "FAILED"
            )
        ).all()
    return [(r.sender, read_receipt("FAILED", bytes(r.body))) for r in rows]


def test_the_failed_reporter_runs_with_only_its_acls(secure: LocalCluster, tmp_path: Path) -> None:
    """R-DLQ-4 on the secured broker: b dead-letters a's brief (TTL_TOO_LONG); the FAILED
    reporter of host r -- a host with no gateway, whose login has only the reporter set (read
    the DLQ in its group, write inboxes, idempotent write) -- runs ``fleet dlq report --config
    --relay`` and main-a gets exactly one FAILED, signed by r; no password in its output."""
    fleet = Fleet.create(tmp_path, secure.bootstrap_servers, ("a", "b", "r"))
    names = TopicNames(prefix=fleet.prefix)
    topology(secure, names, ("a", "b"))
    for host in ("a", "b"):
        acls(secure, "gateway", host, fleet.prefix)
    acls(secure, "reporter", "r", fleet.prefix)
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    work = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    injected: list[str] = []
    a = build_gateway(
        _gateway(secure, fleet, tmp_path, "a", main), signer=fleet.signers["a"], trust=fleet.trust
    )
    b = build_gateway(
        _gateway(secure, fleet, tmp_path, "b", work, max_ttl_s=60),  # refuses a 900 s brief
        signer=fleet.signers["b"],
        trust=fleet.trust,
        callbacks={"worker-b": lambda *, msg_id, **_: injected.append(msg_id)},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: a.client.knows("worker-b"), timeout_s=60, what="worker-b in a's roster")
        sent = a.client.send(sender="main-a", to="worker-b", body=b"brief", ttl_s=900)
        watcher = (
            Factories()
            .secured(login(secure, ADMIN))
            .consumer(consumer_config(secure.bootstrap_servers, unique_name("dlq-watch")))
        )
        try:  # the reporter's --idle-exit must not start counting before b dead-lettered it
            dlq = TopicPartition(names.dlq, 0)
            wait_until(
                lambda: watcher.get_watermark_offsets(dlq, timeout=5, cached=False)[1] >= 1,
                timeout_s=60,
                what="the dead letter in the DLQ",
            )
        finally:
            watcher.close()
        r_store = f"sqlite:///{tmp_path / 'r-only.sqlite'}"
        kafka = login_file(secure, "r").read_text(encoding="utf-8")
        config = fleet.config_file("r", "", store=r_store, extra=kafka)
        cmd = [sys.executable, "-m", "pipeline", "dlq", "report", "--config", str(config)]
        done = subprocess.run(
            [*cmd, "--relay", "--idle-exit", "5"],
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            timeout=180,
        )
        output = (done.stdout + done.stderr).decode(errors="replace")
        assert done.returncode == 0, output
        assert "reported 1 FAILED" in output
        wait_until(
            lambda: len(held_failed(a.engine)) >= 1, timeout_s=60, what="the FAILED held for main-a"
        )
        (sender, receipt), *more = held_failed(a.engine)
        assert more == []
        assert sender == "r._gateway", "signed and sent by the reporting host"
        assert (receipt.msg_id, receipt.stage, receipt.reason) == (
            sent.msg_id,
            "dlq",
            "TTL_TOO_LONG",
        )
        assert injected == []
        for pw in passwords(secure):
            assert pw not in output
        # the DLQ's owner, with only the dlq-owner set, lists the dead letter and replays it
        acls(secure, "dlq-owner", "owner", fleet.prefix)
        owner = ["--prefix", fleet.prefix, "--bootstrap", secure.bootstrap_servers]
        owner += ["--kafka-config", str(login_file(secure, "owner"))]
        listed = CliRunner().invoke(app, ["dlq", "ls", "--json", *owner])
        assert listed.exit_code == 0, listed.output
        (letter,) = json.loads(listed.stdout)
        assert (letter["reason"], letter["topic"]) == ("TTL_TOO_LONG", names.inbox("b"))
        replayed = CliRunner().invoke(app, ["dlq", "replay", "--json", *owner])
        assert replayed.exit_code == 0, replayed.output
        assert json.loads(replayed.stdout)["replayed"] == 1
    finally:
        a.gateway.stop()
        b.gateway.stop()


def test_the_reporter_login_cannot_read_an_inbox(secure: LocalCluster) -> None:
    """The reporter's set holds no READ on an inbox: its login, subscribing to inbox.a in its own
    group, is refused NOT_AUTHORIZED."""
    prefix = unique_name("rep").replace(".", "") + "."
    names = TopicNames(prefix=prefix)
    topology(secure, names, ("a",), inbox_partitions=1)
    acls(secure, "reporter", "r", prefix)
    spy = (
        Factories()
        .secured(login(secure, "r"))
        .consumer(consumer_config(secure.bootstrap_servers, f"{prefix}dlq-reporter"))
    )
    spy.subscribe([names.inbox("a")])
    refused: FleetError | None = None
    for _ in range(60):
        msg = spy.poll(0.5)
        if msg is not None:
            assert msg.error() is not None, "the reporter login read a record of inbox.a"
            refused = as_fleet_error(msg.error(), f"read {names.inbox('a')}")
            break
    spy.close()
    assert refused is not None and refused.reason == Security.NOT_AUTHORIZED
