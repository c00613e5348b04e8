"""Shared fixtures. Real-broker fixtures are session-scoped; names are unique per test."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka.admin as kafka_admin
import pytest

from pipeline.kafka.local import LauncherConfig, LocalCluster
from pipeline.testing import BrokerHandle, start_test_broker, test_broker_dir, unique_name

_BROKER_LINES: list[str] = []

# A cluster the suite did not start: KAFKA_BOOTSTRAP, and KAFKA_COMMAND_CONFIG for its login
# (docs/local-kafka.md "A cluster you bring"). The login is laid over every client the suite
# builds for that cluster, here and in the processes the tests start (PYTHONPATH carries the
# sitecustomize that does it); commands the tests run no longer see KAFKA_COMMAND_CONFIG, so each
# takes only the login its own command line gives, as on the suite's own broker.
_LOGIN_DIR = Path(__file__).parent / "external_login"
if os.environ.get("KAFKA_COMMAND_CONFIG") and os.environ.get("KAFKA_BOOTSTRAP"):
    os.environ["FLEET_TEST_KAFKA_LOGIN"] = str(
        Path(os.environ.pop("KAFKA_COMMAND_CONFIG")).resolve()
    )
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_LOGIN_DIR), os.environ.get("PYTHONPATH")) if p
    )
if os.environ.get("FLEET_TEST_KAFKA_LOGIN"):
    sys.path.insert(0, str(_LOGIN_DIR))
    import tempfile

    import fleet_external_login

    fleet_external_login.install()
    if "KCAT_CONFIG" not in os.environ:  # the tests' kcat reads the login from there
        _KCAT_DIR = tempfile.mkdtemp(prefix="fleet-kcat-")  # removed by pytest_unconfigure
        os.environ["KCAT_CONFIG"] = fleet_external_login.write_kcat_config(
            os.environ["FLEET_TEST_KAFKA_LOGIN"], _KCAT_DIR
        )
        os.environ[fleet_external_login.KEYS_ENV] = os.environ["KCAT_CONFIG"]


def pytest_unconfigure(config: pytest.Config) -> None:
    # not at exit: a forked child's exit would run it too, under the workers' feet
    folder = globals().get("_KCAT_DIR")
    if folder is not None and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


# Fixtures that start, kill, pause or stop brokers of their own: a test asking for one is
# `own_cluster`, and skipped while KAFKA_BOOTSTRAP names a cluster that is not the suite's.
OWN_CLUSTER_FIXTURES = frozenset(
    {"kafka3", "_cluster3", "kafka_own", "_own_cluster", "secure_kafka"}
)
OWN_CLUSTER_REASON = (
    "own_cluster: starts, kills or pauses brokers of its own; KAFKA_BOOTSTRAP names a cluster "
    "that is not the suite's (FLEET_TEST_OWN_CLUSTERS=1 runs it beside it)"
)


@functools.cache
def kcat_refusal() -> str | None:
    """Why kcat cannot read the cluster KAFKA_BOOTSTRAP names with its login (None: it can, or
    no login is given). Asked once per process, only when a test that uses kcat is selected."""
    import shutil
    import subprocess

    if not os.environ.get("FLEET_TEST_KAFKA_LOGIN"):
        return None
    kcat = shutil.which("kcat")
    if kcat is None:
        return "kcat: not installed"
    probe = subprocess.run(
        [kcat, "-b", os.environ["KAFKA_BOOTSTRAP"], "-L", "-m", "20"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if probe.returncode == 0:
        return None
    import re

    version = subprocess.run([kcat, "-V"], capture_output=True, text=True, check=False).stdout
    lib = re.search(r"librdkafka ([0-9.]+)", version)
    failed = [line for line in probe.stderr.splitlines() if "error" in line.lower()]
    detail = failed[0].rsplit(": ", 1)[-1] if failed else probe.stderr.strip()[-200:]
    detail = re.sub(r"\s*\(after .*\)$", "", detail)  # one reason for every worker's probe
    return (
        f"kcat: this machine's kcat cannot log in to KAFKA_BOOTSTRAP's cluster ({detail}); it "
        f"links librdkafka {lib.group(1) if lib else '?'}, SCRAM against Kafka 4 needs 2.6.1+"
    )


def external_cluster() -> bool:
    """True when KAFKA_BOOTSTRAP names the cluster: someone else's, whose brokers no test may
    start, stop or pause (unless FLEET_TEST_OWN_CLUSTERS=1 lets the suite start its own too)."""
    return bool(os.environ.get("KAFKA_BOOTSTRAP")) and (
        os.environ.get("FLEET_TEST_OWN_CLUSTERS") != "1"
    )


def _announce(request: pytest.FixtureRequest, line: str) -> None:
    """Print now (capture off) and again in the summary: CI's log must show the broker version."""
    _BROKER_LINES.append(line.strip())
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capman = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            reporter.write_line(line)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _BROKER_LINES:
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist (`make test`) the brokers start in the workers, whose output is not
    # shown: each worker hands its lines to the controller, which prints them in the summary.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fleet_broker_lines"] = list(_BROKER_LINES)


def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's hook on the controller: a worker finished; keep its broker lines."""
    for line in getattr(node, "workeroutput", {}).get("fleet_broker_lines", []):
        _BROKER_LINES.append(f"{line} (worker {node.gateway.id})")


@pytest.fixture(scope="session")
def kafka(request: pytest.FixtureRequest) -> Iterator[BrokerHandle]:
    """One real broker for the session (KAFKA_BOOTSTRAP, testcontainers, or the launcher)."""
    handle = start_test_broker(nodes=1, name="single")
    _announce(
        request,
        f"\nkafka broker: source={handle.source} bootstrap={handle.bootstrap} "
        f"Kafka version: {handle.version or 'unknown (external)'}",
    )
    yield handle
    handle.close()


@pytest.fixture(scope="session")
def _cluster3(request: pytest.FixtureRequest) -> Iterator[BrokerHandle]:
    handle = start_test_broker(nodes=3, name="triple")
    _announce(
        request, f"\nkafka 3-node cluster: {handle.bootstrap} Kafka version: {handle.version}"
    )
    yield handle
    handle.close()


@pytest.fixture
def kafka3(_cluster3: BrokerHandle) -> BrokerHandle:
    """A three-node KRaft cluster we control (kill -9, pause, restart a node), one for the
    session. Each test gets every node running: a node a test left killed is started again
    (same data) before the next test, not at the end of the one that killed it."""
    assert _cluster3.cluster is not None
    start_whole(_cluster3.cluster)
    return _cluster3


def start_whole(cluster: LocalCluster) -> None:
    """Start again any node a test left stopped or killed (same data), and wait until ready."""
    if not all(n.is_running() for n in cluster.nodes):
        cluster.start_again()


@pytest.fixture(scope="session")
def _own_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        LauncherConfig(
            directory=test_broker_dir("own"),
            nodes=1,
            heap_mb=512,
            # a restart after kill -9 recovers every earlier test's logs: on a loaded machine
            # that is slow, and a slow start is no failure
            ready_timeout_s=300.0,
        ),
        owned=True,
    ).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def kafka_own(_own_cluster: LocalCluster) -> LocalCluster:
    """A one-node cluster of our own, for tests that kill -9 or stop the broker (the session's
    ``kafka`` may be someone else's, KAFKA_BOOTSTRAP). One for the session: each test gets it
    running, whatever the one before did (unique names keep tests apart, as on ``kafka``)."""
    start_whole(_own_cluster)
    return _own_cluster


# Every login the secured modules use (each host's login is its host id), plus `admin`.
SECURE_LOGINS = ("a", "b", "c", "s", "z", "pool", "exporter", "r", "owner")


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[LocalCluster]:
    """One SASL_SSL cluster (``fleet kafka up --secure``) for every secured module.

    Tests share it by using unique topic prefixes, groups and grants. A test that stops the
    cluster starts it again (``stop_all``/``start_again`` keep the data, logins and ACLs); the one
    that rotates login z's password puts the recorded one back."""
    cluster = LocalCluster(
        LauncherConfig(
            directory=test_broker_dir("secure"),
            secure_hosts=SECURE_LOGINS,
            heap_mb=512,
            ready_timeout_s=300.0,  # the shared machine may be loaded: a slow start is no failure
        ),
        owned=True,
    ).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def kafka_login_properties() -> str:
    """The session cluster's login as ``.properties`` lines, for a test that writes its own
    ``--command-config`` file: the file KAFKA_COMMAND_CONFIG named, or PLAINTEXT on ours."""
    path = os.environ.get("FLEET_TEST_KAFKA_LOGIN")
    return Path(path).read_text(encoding="utf-8") if path else "security.protocol=PLAINTEXT\n"


@pytest.fixture
def admin(kafka: BrokerHandle) -> kafka_admin.AdminClient:
    return kafka_admin.AdminClient({"bootstrap.servers": kafka.bootstrap})


TopicFactory = Callable[..., str]


def make_topic_factory(bootstrap: str) -> TopicFactory:
    """Topics with the cluster's default replication (``-1``: ``default.replication.factor``),
    so a cluster with ``min.insync.replicas=2`` takes ``acks=all`` writes to them."""
    admin = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})

    def create(
        prefix: str = "t",
        *,
        partitions: int = 1,
        replication: int = -1,
        config: dict[str, str] | None = None,
    ) -> str:
        name = unique_name(f"test.{prefix}")
        futures = admin.create_topics(
            [
                kafka_admin.NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=replication,
                    config=config or {},
                )
            ]
        )
        futures[name].result(timeout=30)
        return name

    return create


@pytest.fixture
def new_topic(kafka: BrokerHandle) -> TopicFactory:
    """Create a uniquely named topic on the session broker: ``new_topic("x", partitions=3)``."""
    return make_topic_factory(kafka.bootstrap)


@pytest.fixture
def group_id() -> str:
    return unique_name("test.group")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that starts, kills or pauses brokers needs a cluster of its own: marked by the
    # fixture it asks for, or by hand (`own_cluster`) when it starts its JVMs itself.
    own = pytest.mark.skip(reason=OWN_CLUSTER_REASON)
    for item in items:
        if OWN_CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.own_cluster)
        if external_cluster() and "own_cluster" in item.keywords:
            item.add_marker(own)
    # kcat, the independent client some tests read with, may be unable to log in to a cluster
    # the suite did not start (an old librdkafka): those tests say so instead of failing
    if os.environ.get("FLEET_TEST_KAFKA_LOGIN") and any("kcat" in i.keywords for i in items):
        refusal = kcat_refusal()
        if refusal is not None:
            for item in items:
                if "kcat" in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=refusal))
    # The shipped lab scenarios take minutes each: `make lab` runs them, `make test` does not.
    if os.environ.get("FLEET_LAB_SCENARIOS") != "1":
        lab = pytest.mark.skip(reason="shipped lab scenarios run with `make lab`")
        for item in items:
            if "lab_scenarios" in item.keywords:
                item.add_marker(lab)
    # Allow a quick unit-only run: FLEET_SKIP_KAFKA=1 deselects real-broker tests explicitly.
    if os.environ.get("FLEET_SKIP_KAFKA") == "1":
        skip = pytest.mark.skip(reason="FLEET_SKIP_KAFKA=1")
        for item in items:
            if "kafka" in item.keywords or "cluster3" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL for the store contract suites (FLEET_TEST_PG_URL or a local server)."""
    from pipeline.testing import start_test_postgres

    handle = start_test_postgres()
    yield handle.url
    handle.close()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """Contract-suite parameter: every store test runs on SQLite (WAL) and real PostgreSQL.

    Each PostgreSQL test gets its own schema-less database so tests never see each other's rows.
    """
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    base = request.getfixturevalue("postgres_url")
    import sqlalchemy as sa

    dbname = unique_name("t").replace(".", "_")
    engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{dbname}"'))
    engine.dispose()
    return base.rsplit("/", 1)[0] + f"/{dbname}"
