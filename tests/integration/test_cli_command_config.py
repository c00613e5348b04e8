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
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# as for kafka-console-consumer --command-config\n"
        "security.protocol=PLAINTEXT\n"
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
