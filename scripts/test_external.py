"""``make test-external``: the suite against a secured three-node cluster that is not the suite's.

The cluster is started here, apart from the test fixtures, with the project's local-broker code
(``pipeline.kafka.local``, what ``fleet kafka up --nodes 3 --secure`` runs), and then treated as
someone else's: the suite gets only ``KAFKA_BOOTSTRAP`` and ``KAFKA_COMMAND_CONFIG`` (a Java
client ``.properties`` file, as a team writes for ``kafka-console-consumer --command-config``),
exactly what it would get for a production cluster (docs/local-kafka.md "A cluster you bring").

The cluster:

* three KRaft nodes on loopback, ``default.replication.factor=3``, ``min.insync.replicas=2``;
* clients log in with SASL SCRAM-SHA-512 over ``SASL_PLAINTEXT`` (the brokers between
  themselves too, as ``admin``; the controller listener stays mutual TLS);
* ``StandardAuthorizer``, nothing allowed that no ACL allows; ``admin`` is the super user, the
  test user ``tester`` is not: it gets ``ALL`` on every topic, group and transactional id and
  on the cluster (the suite creates and deletes topics, commits offsets, writes its own ACLs),
  granted by ``admin`` before the suite starts.

The cluster is stopped at the end, always: on success, failure, Ctrl-C or SIGTERM (and its JVMs
die with this process if it is killed, ``owned``). Arguments are passed to pytest
(``make test-external`` gives ``-n 2 --dist loadfile``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LauncherConfig, LocalCluster
from pipeline.kafka.local.secure import ADMIN, BROKER_PRINCIPAL

TEST_USER = "tester"
PROTOCOL = "SASL_PLAINTEXT"
MECHANISM = "SCRAM-SHA-512"
# The secured launcher names its client listener SASL_SSL; mapping that name to SASL_PLAINTEXT
# keeps every other line (SCRAM logins, inter-broker login, authorizer, mTLS controller).
CLUSTER_PROPERTIES = {
    "listener.security.protocol.map": f"SASL_SSL:{PROTOCOL},CONTROLLER:SSL",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "super.users": f"User:{ADMIN};User:{BROKER_PRINCIPAL}",
}


class SaslPlaintextCluster(LocalCluster):
    """The secured local cluster with its client listener in SASL_PLAINTEXT (no TLS files)."""

    def client_config(self, user: str = ADMIN) -> dict[str, Any]:
        conf = {k: v for k, v in super().client_config(user).items() if not k.startswith("ssl.")}
        conf["security.protocol"] = PROTOCOL
        return conf


def client_properties(cluster: SaslPlaintextCluster, user: str) -> str:
    """``user``'s login as a Java client properties file (it holds the password: 0600)."""
    assert cluster.secure is not None
    password = cluster.secure.password(user).reveal()
    return (
        "# the test user's login, as written for kafka-console-consumer --command-config\n"
        f"bootstrap.servers={cluster.bootstrap_servers}\n"
        f"security.protocol={PROTOCOL}\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
    )


def grant_test_user(cluster: SaslPlaintextCluster) -> None:
    """``ALL`` for the test user on every topic, group and transactional id and on the cluster,
    written by ``admin``; then the cluster is warmed up as the test user."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(cluster.client_config(ADMIN))
    bindings = [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            f"User:{TEST_USER}",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )
        for kind, name in (
            (ResourceType.TOPIC, "*"),
            (ResourceType.GROUP, "*"),
            (ResourceType.TRANSACTIONAL_ID, "*"),
            (ResourceType.BROKER, "kafka-cluster"),
        )
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    warm_up(cluster.client_config(TEST_USER))


def warm_up(conf: dict[str, Any]) -> None:
    """As the test user: create a topic, write to it with ``acks=all``, commit a group offset,
    delete the topic. Retried (bounded) until the grants reach every broker and the group
    coordinator (``__consumer_offsets``, created by the first group) has loaded: a cluster
    someone else runs has long done both before a suite comes to it."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    probe = f"test-external-probe-{os.getpid()}"
    deadline = time.monotonic() + 180
    step = "create"
    while True:
        try:
            if step == "create":
                admin.create_topics([NewTopic(probe, 1, -1)])[probe].result(30)
                step = "write"
            if step == "write":
                producer = Producer({**conf, "acks": "all", "enable.idempotence": True})
                producer.produce(probe, b"warm-up")
                if producer.flush(30) != 0:
                    raise RuntimeError("warm-up write not acknowledged")
                step = "commit"
            if step == "commit":
                consumer = Consumer({**conf, "group.id": probe, "enable.auto.commit": False})
                try:
                    consumer.commit(offsets=[TopicPartition(probe, 0, 1)], asynchronous=False)
                finally:
                    consumer.close()
                step = "delete"
            admin.delete_topics([probe])[probe].result(30)
            return
        except Exception:  # not ready yet: retry, bounded
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def run_suite(bootstrap: str, login: Path, pytest_args: list[str]) -> int:
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "KAFKA_COMMAND_CONFIG": str(login)}
    env.pop("FLEET_KAFKA_CONFIG", None)
    suite = subprocess.Popen([sys.executable, "-m", "pytest", *pytest_args], env=env)
    try:
        return suite.wait()
    finally:
        if suite.poll() is None:  # stopped from outside: end the suite before the cluster
            suite.terminate()
            try:
                suite.wait(60)
            except subprocess.TimeoutExpired:
                suite.kill()


def main(argv: list[str]) -> int:
    def stop_here(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally below

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop_here)
    folder = Path(tempfile.mkdtemp(prefix="fleet-external-"))
    cluster = SaslPlaintextCluster(
        LauncherConfig(
            directory=folder / "cluster",
            nodes=3,
            heap_mb=512,
            ready_timeout_s=300.0,
            secure_hosts=(TEST_USER,),
            extra_properties=CLUSTER_PROPERTIES,
        ),
        owned=True,
    )
    try:
        cluster.start()
        grant_test_user(cluster)
        login = folder / "client.properties"
        fd = os.open(login, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(client_properties(cluster, TEST_USER))
        print(
            f"test-external: secured three-node cluster at {cluster.bootstrap_servers} "
            f"({PROTOCOL} {MECHANISM}, min.insync.replicas=2, default.replication.factor=3), "
            f"login {login} (user {TEST_USER})",
            flush=True,
        )
        return run_suite(cluster.bootstrap_servers, login, argv)
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
        print("test-external: cluster stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
