"""The connection options on a real broker: a ``kafka-console-consumer``-style ``.properties``
file and ``-X`` reach every client a command builds, the brokers come from ``-b`` or
``$KAFKA_BOOTSTRAP`` alone (R-SEC-1: the login a team already has is the one used)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.kafka.topics import TopicNames
from pipeline.testing import BrokerHandle, unique_name

pytestmark = pytest.mark.kafka


def test_topics_apply_with_a_properties_file_and_dash_x(
    kafka: BrokerHandle, kafka_login_properties: str, tmp_path: Path
) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# as for kafka-console-consumer --command-config\n"
        f"{kafka_login_properties}\n"
        "bootstrap.servers=127.0.0.1:1\n"  # ignored: -b wins
        "client.id : fleet-cli-test\n"
        "request.timeout.ms=20000\n"
    )
    prefix = unique_name("test.cmdcfg") + "."
    args = ["topics", "apply", "--host", "h1", "--prefix", prefix, "--partitions", "1"]
    res = CliRunner().invoke(
        app,
        [*args, "-b", kafka.bootstrap, "--command-config", str(props),
         "-X", "socket.timeout.ms=15000", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert TopicNames(prefix=prefix).inbox("h1") in json.loads(res.stdout)["created"]
    meta = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=30)
    assert TopicNames(prefix=prefix).inbox("h1") in meta.topics


def test_the_environment_names_the_brokers_and_a_bad_property_is_refused(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    prefix = unique_name("test.cmdenv") + "."
    args = ["topics", "apply", "--host", "h1", "--prefix", prefix, "--dry-run", "--json"]
    env = {"KAFKA_BOOTSTRAP": kafka.bootstrap}
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["created"]) > 0
    jks = tmp_path / "jks.properties"
    jks.write_text("security.protocol=SSL\nssl.truststore.location=/etc/trust.jks\n")
    refused = CliRunner().invoke(app, [*args, "--command-config", str(jks)], env=env)
    assert refused.exit_code == 1 and "[PROPERTY_UNMAPPABLE]" in refused.output


def test_gateway_run_takes_its_cluster_and_login_from_the_command_line(
    kafka: BrokerHandle, kafka_login_properties: str, tmp_path: Path
) -> None:
    """``fleet gateway run`` as a service runs it: the file named by ``FLEET_CONFIG``, the brokers
    from ``-b`` over the file's (which points nowhere), the login from ``--command-config``
    properties plus ``-X``, JSON logs on stderr; SIGTERM stops it with exit 0."""
    from pipeline.chaos.gateway_process import RUNNING_LINE
    from pipeline.host.config import load_config
    from pipeline.support.processes import FleetProcess
    from pipeline.support.waiting import wait_until
    from tests.integration.fleet_hosts import Fleet

    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    config = fleet.config_file(
        "A", '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    text = config.read_text()
    assert kafka.bootstrap in text
    config.write_text(text.replace(kafka.bootstrap, "127.0.0.1:1"))  # the file's: nowhere
    props = tmp_path / "client.properties"
    props.write_text(f"{kafka_login_properties}\nclient.id=gw-a\n")
    argv = ["gateway", "run", "-b", kafka.bootstrap, "--command-config", str(props),
            "-X", "socket.keepalive.enable=true", "--log-format", "json"]  # fmt: skip
    gw = FleetProcess(tmp_path / "gw.log", argv, env={"FLEET_CONFIG": str(config)}).start()
    try:
        wait_until(lambda: gw.printed(RUNNING_LINE) or not gw.alive, timeout_s=120, what="A runs")
        assert gw.alive, gw.output()
        group = TopicNames(prefix=load_config(config).topic_prefix).gateway_group("A")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})

        def joined() -> bool:  # on the cluster -b named, not the file's
            groups = admin.list_consumer_groups().result(30).valid
            return group in {g.group_id for g in groups}

        wait_until(joined, timeout_s=60, what=f"group {group} on the broker")
    finally:
        code = gw.stop()
    assert code == 0, gw.output()
    logged = [json.loads(line) for line in gw.output().splitlines() if line.startswith('{"ts"')]
    assert logged and all({"ts", "level", "logger", "message"} <= set(r) for r in logged)
