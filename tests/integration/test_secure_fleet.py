"""The rest of the suite on a real SASL_SSL broker, each process under its own login with only
the ACLs ``fleet acls plan`` gives it (R-SEC-1: per-gateway logins over TLS).

The session's secured cluster (conftest ``secure_kafka``), shared with the other secured
modules; the tests that stop it start it again, the rotation puts z's password back. In order: a host whose login lacks WRITE on the other
host's inbox cannot inject; a worker-pool member with the ``pool`` set; the control plane
(SPAWN on another host, then STOP); ``fleet exporter``'s HTTP endpoint under the exporter login;
a whole-cluster outage under running gateways; a password rotated under a running gateway,
which must stop it with AUTH_FAILED. The last test scans every captured line, every child's
output and the broker's logs for every password (the rotated one included).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from sqlalchemy import select
from typer.testing import CliRunner

from pipeline.bootstrap.client import build_client, build_control_client
from pipeline.bootstrap.gateway import build_gateway
from pipeline.chaos.gateway_process import GatewayProc
from pipeline.cli.main import app
from pipeline.envelope import Kind
from pipeline.envelope.receipts import read_receipt
from pipeline.host.config import load_config
from pipeline.host.entity_config import EntityConfig, InjectorSpec, ProfileConfig
from pipeline.host.held import held_table
from pipeline.kafka.acls import Grant, Operation, Pattern, Resource, apply_grants, gateway_grants
from pipeline.kafka.local import LocalCluster
from pipeline.kafka.local.ports import free_ports
from pipeline.kafka.local.secure import ADMIN
from pipeline.kafka.settings import admin_config, consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.tables import RowStatus, outbox
from pipeline.presence.roles import Delivery, Role
from pipeline.reasons import Security
from pipeline.support.processes import kill_recorded
from pipeline.support.waiting import wait_until
from pipeline.testing import unique_name
from tests.integration.fleet_hosts import Fleet
from tests.integration.secure_logins import (
    acls,
    admin_factories,
    commit_once,
    gateway_config,
    login_file,
    passwords,
    topology,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
# logins used here (conftest's SECURE_LOGINS): gateways a, b, c (c: no write on inboxes),
# s (the outage), z (the rotation); pool, exporter

_SEEN: list[str] = []  # every captured log line, output and error text: scanned at the end
_LOGS: list[Path] = []  # every child process's output file: scanned at the end
_ROTATED: list[str] = []  # passwords set after start: scanned too


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


def _pull(gateway: Any, gid: str, kinds: list[str]) -> list[Any]:
    return list(gateway.client.poll(gid, kinds=kinds))


def test_a_host_without_write_on_inboxes_cannot_inject(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """R-SEC-2: a host without write on inboxes cannot inject, with the relay's
    permanent-error rule (docs/outbox.md): host c's login has the gateway set minus WRITE on
    the other inboxes. c's brief to worker-b is refused by the broker: c's outbox row becomes
    terminal FAILED with reason NOT_AUTHORIZED, its error naming the operation and the topic;
    main-c gets exactly one FAILED saying so; nothing reaches inbox.b and nothing is injected;
    both gateways keep running."""
    fleet = Fleet.create(tmp_path, secure.bootstrap_servers, ("c", "b"))
    names = TopicNames(prefix=fleet.prefix)
    topology(secure, names, ("c", "b"))
    acls(secure, "gateway", "b", fleet.prefix)
    planned = gateway_grants("c", names)
    inbox_write = [
        g
        for g in planned
        if g.pattern is Pattern.PREFIXED
        and g.name == f"{fleet.prefix}inbox."
        and g.operation is Operation.WRITE
    ]
    assert len(inbox_write) == 1
    own_inbox = Grant(
        principal="User:c",
        resource=Resource.TOPIC,
        name=names.inbox("c"),
        pattern=Pattern.LITERAL,
        operation=Operation.WRITE,
    )  # its own inbox only: the FAILED the relay stages for main-c goes there
    admin = admin_factories(secure)
    grants = (*(g for g in planned if g not in inbox_write), own_inbox)
    apply_grants(admin.admin(admin_config(secure.bootstrap_servers)), grants)

    injected: list[bytes] = []
    main = EntityConfig(gid="main-c", role=Role.MAIN, delivery=Delivery.PULL)
    work = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    # c's own inject deadline never fires here: its FAILED (INJECT_TIMEOUT, same msgId, so
    # still one in all) would race the relay's on a loaded machine; this test is the relay's
    c = build_gateway(
        gateway_config(secure, fleet, tmp_path, "c", main, inject_deadline_s=3600),
        signer=fleet.signers["c"],
        trust=fleet.trust,
    )
    b = build_gateway(
        gateway_config(secure, fleet, tmp_path, "b", work),
        signer=fleet.signers["b"],
        trust=fleet.trust,
        callbacks={"worker-b": lambda *, body, **_: injected.append(body)},
    )
    c.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: c.client.knows("worker-b"), timeout_s=60, what="worker-b in c's roster")
        sent = c.client.send(sender="main-c", to="worker-b", body=b"brief")

        def row() -> Any:
            with c.engine.connect() as conn:
                return conn.execute(
                    select(outbox.c.status, outbox.c.error).where(
                        outbox.c.topic == names.inbox("b")
                    )
                ).one()

        wait_until(
            lambda: row().status == int(RowStatus.FAILED), timeout_s=60, what="c's row FAILED"
        )
        assert row().error == Security.NOT_AUTHORIZED  # the row stays, with its reason
        failed: list[Any] = []
        wait_until(
            lambda: failed.extend(_pull(c, "main-c", ["FAILED", "INJECTED"])) or failed,
            timeout_s=60,
            what="the FAILED for main-c",
        )
        time.sleep(2.0)  # a second answer would show up now
        failed += _pull(c, "main-c", ["FAILED", "INJECTED"])
        assert [m.kind for m in failed] == ["FAILED"], failed
        receipt = read_receipt("FAILED", failed[0].body)
        _SEEN.append(receipt.error)
        assert (receipt.msg_id, receipt.reason, receipt.stage) == (
            sent.msg_id,
            Security.NOT_AUTHORIZED,
            "relay",
        )
        assert receipt.error.startswith(f"[NOT_AUTHORIZED] write topic {names.inbox('b')}: ")
        assert "fleet acls plan" in receipt.error
        rows_failed = c.registry.get_sample_value(
            "fleet_outbox_rows_failed_total", {"reason": "NOT_AUTHORIZED"}
        )
        assert rows_failed == 1.0
        watcher = admin.consumer(
            consumer_config(secure.bootstrap_servers, unique_name("inbox-watch"))
        )
        try:
            ends = [
                watcher.get_watermark_offsets(
                    TopicPartition(names.inbox("b"), p), timeout=10, cached=False
                )[1]
                for p in range(6)  # the gateway's inbox_partitions
            ]
        finally:
            watcher.close()
        assert ends == [0] * 6, "a record reached inbox.b"
        assert injected == []
        assert not c.gateway.stop_event.is_set() and not b.gateway.stop_event.is_set()
    finally:
        c.gateway.stop()
        b.gateway.stop()


def test_a_pool_member_runs_with_only_the_pool_set(secure: LocalCluster, tmp_path: Path) -> None:
    """A worker pool on the secured broker: ``fleet pool run --kafka-config`` under a login
    with only ``fleet acls apply --role pool --pool P`` (read pool.P in its group, write the DLQ)
    runs every good step once and dead-letters a keyless poison record (RETRIES_EXHAUSTED,
    R-FAIL-3) into the DLQ; the operator created the topics, the member creates
    none and reads no roster."""
    pool = f"p{os.getpid()}{int(time.time()) % 100000}"
    names = TopicNames()  # `fleet pool run|submit` use the default prefix
    topology(secure, names, (), pools=(pool,), pool_partitions=2)
    acls(secure, "pool", "pool", names.prefix, "--pool", pool)
    store = f"sqlite:///{tmp_path / 'pool.sqlite'}"
    events = tmp_path / "events.jsonl"
    log = tmp_path / "member.log"
    _LOGS.append(log)
    cmd = [sys.executable, "-m", "pipeline", "pool", "run", "--pool", pool]
    cmd += ["--bootstrap", secure.bootstrap_servers, "--store-url", store, "--member", "m1"]
    cmd += ["--events", str(events), "--partitions", "2"]
    cmd += ["--command", "grep -v poison", "--kafka-config", str(login_file(secure, "pool"))]
    with log.open("ab") as out:
        member = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
    try:
        args = ["pool", "submit", "--pool", pool, "--bootstrap", secure.bootstrap_servers]
        args += ["--json", "--kafka-config", str(login_file(secure, ADMIN))]
        submitted = CliRunner().invoke(app, args, input="k1\tfirst\nk2\tsecond\npoison\n")
        assert submitted.exit_code == 0, submitted.output
        ids = json.loads(submitted.stdout)["msg_ids"]

        def ran() -> set[str]:
            if not events.exists():
                return set()
            lines = [json.loads(x) for x in events.read_text().splitlines() if x]
            return {e["event_id"] for e in lines if e["kind"] == "ran"}

        wait_until(
            lambda: ran() >= set(ids[:2]), timeout_s=90, what=f"the good steps\n{log.read_text()}"
        )
        owner = ["--prefix", names.prefix, "--bootstrap", secure.bootstrap_servers]
        owner += ["--kafka-config", str(login_file(secure, ADMIN))]
        letters: list[Any] = []

        def dead_lettered() -> bool:
            listed = CliRunner().invoke(app, ["dlq", "ls", "--json", *owner])
            assert listed.exit_code == 0, listed.output
            letters[:] = [v for v in json.loads(listed.stdout) if v["topic"] == names.pool(pool)]
            return bool(letters)

        wait_until(
            dead_lettered, timeout_s=90, what=f"the poison record in the DLQ\n{log.read_text()}"
        )
        (letter,) = letters
        assert letter["reason"] == "RETRIES_EXHAUSTED"
        assert ids[2] not in ran()
        assert member.poll() is None, log.read_text()
    finally:
        member.send_signal(signal.SIGTERM)
        code = member.wait(60)
    text = log.read_text(errors="replace")
    _SEEN.append(text)
    assert code == 0, text
    assert "NOT_AUTHORIZED" not in text


def _sleeper(markers: Path) -> ProfileConfig:
    """A worker is ``sleep`` (its pid in ``<gid>.pid``); stop kills it and leaves a marker."""
    m = markers
    return ProfileConfig(
        name="sleeper",
        launch=("sh", "-c", f"echo $$ > {m}/{{gid}}.pid; exec sleep 300"),
        stop=("sh", "-c", f"touch {m}/stopped-{{gid}}; kill $(cat {m}/{{gid}}.pid)"),
        injector=InjectorSpec(type="command", command=("sh", "-c", f"cat >> {m}/{{gid}}.in")),
    )


def test_the_control_plane_spawns_and_stops_across_hosts(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """R-SPAWN-3 on the secured broker with the gateway sets only: main-a SPAWNs a worker
    on host b (a writes control.b), b launches it and answers INJECTED (b writes inbox.a); the
    worker's presence reaches a, a brief is injected into it; a STOP ends it (INJECTED, the
    stop command ran) and its tombstone reaches a."""
    fleet = Fleet.create(tmp_path, secure.bootstrap_servers, ("a", "b"))
    names = TopicNames(prefix=fleet.prefix)
    topology(secure, names, ("a", "b"))
    for host in ("a", "b"):
        acls(secure, "gateway", host, fleet.prefix)
    markers = tmp_path / "markers"
    markers.mkdir()
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    a = build_gateway(
        gateway_config(secure, fleet, tmp_path, "a", main, spawn_deadline_s=60.0),
        signer=fleet.signers["a"],
        trust=fleet.trust,
    )
    b = build_gateway(
        gateway_config(secure, fleet, tmp_path, "b", profiles=(_sleeper(markers),)),
        signer=fleet.signers["b"],
        trust=fleet.trust,
    )
    a.gateway.start()
    b.gateway.start()
    control = build_control_client(
        gateway_config(secure, fleet, tmp_path, "a", main, spawn_deadline_s=60.0),
        signer=fleet.signers["a"],
        engine=a.engine,
    )

    def answers(want: int) -> dict[str, tuple[str, str]]:
        got: dict[str, tuple[str, str]] = {}

        def enough() -> bool:
            for m in _pull(a, "main-a", ["INJECTED", "FAILED"]):
                receipt = read_receipt(m.kind, m.body)
                assert receipt.msg_id not in got, f"a second answer about {receipt.msg_id}"
                got[receipt.msg_id] = (m.kind, receipt.reason)
            return len(got) >= want

        wait_until(enough, timeout_s=60, what=f"{want} answers for main-a")
        return got

    try:
        wait_until(
            lambda: a.client.knows("b._gateway"), timeout_s=60, what="b's gateway in a's roster"
        )
        spawn = control.spawn(requester="main-a", host="b", profile="sleeper", spawn_id="w-1")
        assert answers(1) == {spawn.msg_id: ("INJECTED", "")}
        wait_until(
            lambda: a.client.knows("w-1"), timeout_s=60, what="the spawned worker's presence at a"
        )
        brief = a.client.send(sender="main-a", to="w-1", body=b"first brief")
        assert answers(1) == {brief.msg_id: ("INJECTED", "")}
        assert (markers / "w-1.in").read_bytes() == b"first brief"
        stop = control.stop(requester="main-a", gid="w-1", host="b")
        assert answers(1) == {stop.msg_id: ("INJECTED", "")}
        assert (markers / "stopped-w-1").exists()
        wait_until(
            lambda: a.client.binding("w-1") is None, timeout_s=60, what="w-1's tombstone at a"
        )
        assert not a.gateway.stop_event.is_set() and not b.gateway.stop_event.is_set()
    finally:
        a.gateway.stop()
        b.gateway.stop()
        for pidfile in markers.glob("*.pid"):
            kill_recorded(pidfile)  # never a recycled pid: another test's process


def test_the_exporter_endpoint_serves_lag_under_the_exporter_login(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """``fleet exporter`` on the secured broker: with only the exporter set
    (describe and offsets) its /metrics serves a gateway group's lag in messages and says the
    broker is up; it stops cleanly on SIGTERM."""
    prefix = unique_name("exh").replace(".", "") + "."
    names = TopicNames(prefix=prefix)
    topology(secure, names, ("a",), inbox_partitions=1)
    acls(secure, "exporter", "exporter", prefix)
    server, inbox, group = secure.bootstrap_servers, names.inbox("a"), names.gateway_group("a")
    admin = admin_factories(secure)
    producer = admin.producer(producer_config(server))
    for i in range(3):
        producer.produce(inbox, value=b"secret body %d" % i, key=b"k")
    assert producer.flush(30) == 0
    committer = admin.consumer(consumer_config(server, group))
    commit_once(committer, TopicPartition(inbox, 0, 1))
    committer.close()
    port = free_ports(1)[0]
    log = tmp_path / "exporter.log"
    _LOGS.append(log)
    cmd = [sys.executable, "-m", "pipeline", "exporter", "--bootstrap", server]
    cmd += ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
    cmd += ["--groups-prefix", prefix]
    cmd += ["--interval", "0.5", "--dlq-topic", names.dlq]
    cmd += ["--kafka-config", str(login_file(secure, "exporter"))]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
    want = f'fleet_consumer_lag_messages{{group="{group}",partition="0",topic="{inbox}"}} 2.0'
    text = ""

    def scraped() -> bool:
        nonlocal text
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return False
        return want in text

    try:
        wait_until(scraped, timeout_s=90, what="the group's lag on /metrics", interval_s=0.5)
        assert "fleet_exporter_broker_up 1.0" in text
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    _SEEN.append(text)
    output = log.read_text(errors="replace")
    _SEEN.append(output)
    assert code == 0, output


def test_a_gateway_rides_out_a_secured_cluster_restart(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """On the secured broker (and the login watch's false-positive check): the whole
    cluster is stopped for three presence TTLs under two running gateways and started again.
    Sends during the outage succeed locally, main-b stays live in a's view, every reply is held
    at b exactly once in send order, and neither gateway stops: a broker that is away is an
    outage, not a refused login."""
    fleet = Fleet.create(tmp_path, secure.bootstrap_servers, ("s", "b"))
    names = TopicNames(prefix=fleet.prefix)
    topology(secure, names, ("s", "b"))
    for host in ("s", "b"):
        acls(secure, "gateway", host, fleet.prefix)
    ttl_s = 2.5  # five heartbeats of 0.5 s, as test_presence_outage
    timing = {"presence_ttl_s": ttl_s, "presence_interval_s": 0.5}
    main_s = EntityConfig(gid="main-s", role=Role.MAIN, delivery=Delivery.PULL)
    main_b = EntityConfig(gid="main-b", role=Role.MAIN, delivery=Delivery.PULL)
    s = build_gateway(
        gateway_config(secure, fleet, tmp_path, "s", main_s, **timing),
        signer=fleet.signers["s"],
        trust=fleet.trust,
    )
    b = build_gateway(
        gateway_config(secure, fleet, tmp_path, "b", main_b, **timing),
        signer=fleet.signers["b"],
        trust=fleet.trust,
    )

    def held() -> list[str]:
        with b.engine.connect() as conn:
            rows = conn.execute(
                select(held_table.c.msg_id)
                .where(held_table.c.recipient == "main-b")
                .order_by(held_table.c.id)
            )
            return [r.msg_id for r in rows]

    def reply(body: bytes) -> str:
        return s.client.send(sender="main-s", to="main-b", kind=Kind.REPLY, body=body).msg_id

    s.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: s.client.knows("main-b"), timeout_s=60, what="main-b in s's roster")
        sent = [reply(b"before")]
        wait_until(lambda: held() == sent, timeout_s=60, what="the first reply held at b")
        secure.stop_all()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3 * ttl_s:
            sent.append(reply(b"during"))
            time.sleep(0.5)
        assert s.client.knows("main-b"), "an outage is no departure"
        secure.start_again()
        wait_until(lambda: len(held()) >= len(sent), timeout_s=180, what="b to hold every reply")
        time.sleep(3.0)  # a last redelivery window: a duplicate would show up now
        assert held() == sent, "each reply held exactly once, in send order"
        sent.append(reply(b"after"))
        wait_until(lambda: held() == sent, timeout_s=60, what="a send after the restart")
        assert s.gateway.fatal is None and b.gateway.fatal is None
        assert not s.gateway.stop_event.is_set() and not b.gateway.stop_event.is_set()
    finally:
        s.gateway.stop()
        b.gateway.stop()


def test_a_password_rotated_under_a_running_gateway_stops_it_with_auth_failed(
    secure: LocalCluster, tmp_path: Path
) -> None:
    """The operator sets a new SCRAM password for login z (as admin) while z's
    gateway runs; its open connections stay up, so nothing happens until they reconnect (the
    cluster restarts). Then every client of the gateway is refused: instead of librdkafka
    retrying for ever, ``fleet gateway run`` stops with AUTH_FAILED naming User:z and exits 3
    (docs/security.md, "Rotating a login"). No password, old or new, is printed."""
    assert secure.secure is not None
    fleet = Fleet.create(tmp_path, secure.bootstrap_servers, ("z",))
    names = TopicNames(prefix=fleet.prefix)
    topology(secure, names, ("z",))
    acls(secure, "gateway", "z", fleet.prefix)
    entity = '[[entities]]\ngid = "main-z"\nrole = "main"\ndelivery = "pull"\n'
    kafka = login_file(secure, "z").read_text(encoding="utf-8")
    config = fleet.config_file("z", entity, extra=kafka)
    log = tmp_path / "z.log"
    _LOGS.append(log)
    gateway = GatewayProc(config, log, env={"PYTHONPATH": str(ROOT)}).start()
    client = build_client(load_config(config), signer=fleet.signers["z"])
    try:
        wait_until(
            lambda: client.knows("main-z"), timeout_s=90, what=f"z's gateway up\n{gateway.output()}"
        )
        new_password = f"rotated-{unique_name('pw')}"
        _ROTATED.append(new_password)
        admin = admin_factories(secure).admin(admin_config(secure.bootstrap_servers))
        _set_password(admin, "z", new_password)
        assert gateway.proc is not None and gateway.proc.poll() is None, "no reconnect yet"
        secure.stop_all()
        secure.start_again()
        code = gateway.wait_exit(120)
        output = gateway.output()
        assert code == 3, output[-4000:]
        assert "AUTH_FAILED" in output and "User:z" in output, output[-4000:]
        assert "stopped:" in output  # fleet gateway run's exit line, with the reason
    finally:
        gateway.stop()
        # the cluster is the session's: z's recorded password holds again for whoever comes next
        admin = admin_factories(secure).admin(admin_config(secure.bootstrap_servers))
        _set_password(admin, "z", secure.secure.password("z").reveal())


def _set_password(admin: Any, user: str, password: str) -> None:
    """The operator's rotation: a new SCRAM-SHA-512 credential for ``user``, set as admin."""
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def test_zz_no_password_in_any_output(secure: LocalCluster) -> None:
    """Runs last in the module: no password (the rotated one included) appears in a captured
    log line, a child process's output, a scraped page or the broker's own logs."""
    texts = list(_SEEN)
    texts += [p.read_text(errors="replace") for p in _LOGS if p.exists()]
    for node in secure.nodes:
        texts += [p.read_text(errors="replace") for p in (node.server_log, node.stdout_log)]
    assert len(texts) > 10 and len(_LOGS) >= 3
    secrets = passwords(secure) + _ROTATED
    for text in texts:
        for pw in secrets:
            assert pw not in text
