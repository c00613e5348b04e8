"""Test support shipped with the package: a real broker for tests, plus doubles for handlers.

Broker choice, in order (as confluent-kafka-python's own integration suite picks one):

1. ``KAFKA_BOOTSTRAP`` set -> use that cluster as it is (bring your own).
2. A Docker engine answers -> testcontainers' Kafka module.
3. Otherwise -> the local KRaft launcher (:mod:`pipeline.kafka.local`), Maven Central jars.

Several hosts' keys, trust dir, stores and fleet.toml files: the fleet rig, :mod:`.rig`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import FleetError
from pipeline.kafka.local import LauncherConfig, LocalCluster
from pipeline.kafka.local.cluster import STATE_FILE, owned_by_live_process
from pipeline.support.processes import pid_alive


@dataclass(kw_only=True)
class BrokerHandle:
    """A running broker for tests. ``cluster`` is set only when we launched it ourselves."""

    bootstrap: str
    source: str  # "env" | "testcontainers" | "launcher"
    version: str | None = None
    cluster: LocalCluster | None = None
    _container: Any = field(default=None, repr=False)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self._container is not None:
            self._container.stop()


_CLAIMED: dict[Path, int] = {}


def test_broker_dir(name: str) -> Path:
    """A stable per-user folder, so a crashed run's brokers are reaped by the next run; when a
    live process (another test run, or another pytest-xdist worker of this one) holds that
    folder, a per-process one: two processes never take each other's broker.

    The folder is claimed with an exclusive ``flock`` held for the life of the process, taken
    before the broker starts: two processes asking at once cannot both get it (the state file
    alone is written only once a broker runs, too late to tell two starters apart)."""
    base = Path(tempfile.gettempdir()) / f"fleet-test-kafka-{os.getuid()}"
    stable = base / name
    if stable in _CLAIMED or _claim(stable):
        state = stable / STATE_FILE
        try:
            live = state.exists() and owned_by_live_process(LocalCluster.attach(stable))
        except FleetError:
            live = False
        if not live:
            return stable
    _sweep(base, name)
    own = base / f"{name}-{os.getpid()}"
    _claim(own)
    return own


def _sweep(base: Path, name: str) -> None:
    """Remove the per-process folders of ``name`` whose process is gone (its claim is free:
    its JVMs died with it, PDEATHSIG), so fallbacks do not pile up run after run."""
    for folder in base.glob(f"{name}-*"):
        pid = folder.name.removeprefix(f"{name}-")
        if folder in _CLAIMED or not pid.isdigit() or pid_alive(int(pid)):
            continue
        if _claim(folder):
            os.close(_CLAIMED.pop(folder))
            shutil.rmtree(folder, ignore_errors=True)


def _claim(folder: Path) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".claim", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _CLAIMED[folder] = fd  # held (never closed) until the process ends
    return True


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def start_test_broker(*, nodes: int = 1, name: str | None = None) -> BrokerHandle:
    """Start (or find) a broker as described in the module docstring."""
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env and nodes == 1:
        return BrokerHandle(bootstrap=env, source="env", version=_remote_version(env))
    if nodes == 1 and docker_answers():  # pragma: no cover - no Docker engine on our CI
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        return BrokerHandle(
            bootstrap=container.get_bootstrap_server(),
            source="testcontainers",
            _container=container,
        )
    cluster = LocalCluster(
        LauncherConfig(directory=test_broker_dir(name or f"n{nodes}"), nodes=nodes, heap_mb=512),
        owned=True,
    ).start()
    return BrokerHandle(
        bootstrap=cluster.bootstrap_servers,
        source="launcher",
        version=cluster.version(),
        cluster=cluster,
    )


def _remote_version(bootstrap: str) -> str | None:
    return None  # a BYO cluster's version is not exposed by the metadata API


@dataclass(kw_only=True)
class PostgresHandle:
    """A PostgreSQL server for tests: ``FLEET_TEST_PG_URL`` if set, else a throwaway local one."""

    url: str
    directory: Path | None = None

    def close(self) -> None:
        if self.directory is not None:
            _pg(["pg_ctl", "-D", str(self.directory), "-m", "immediate", "stop"], check=False)
            shutil.rmtree(self.directory, ignore_errors=True)


def _pg_bin(tool: str) -> str:
    found = shutil.which(tool)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"), reverse=True)
    if not candidates:
        raise RuntimeError(f"PostgreSQL tool {tool} not found; install the postgresql package")
    return str(candidates[0])


def _pg(cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    full = [_pg_bin(cmd[0]), *cmd[1:]]
    if os.getuid() == 0:  # initdb and postgres refuse to run as root
        full = ["runuser", "-u", "postgres", "--", *full]
    return subprocess.run(full, capture_output=True, text=True, check=check, timeout=120)


def start_test_postgres() -> PostgresHandle:
    """Start a PostgreSQL on a free loopback port in a temp folder (trust auth, fsync on)."""
    env = os.environ.get("FLEET_TEST_PG_URL")
    if env:
        return PostgresHandle(url=env)
    from pipeline.kafka.local.ports import free_ports

    directory = Path(tempfile.mkdtemp(prefix="fleet-pg-"))
    if os.getuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    port = free_ports(1)[0]
    _pg(["initdb", "-D", str(directory / "data"), "-A", "trust", "-U", "postgres"])
    _pg(
        [
            "pg_ctl",
            "-D",
            str(directory / "data"),
            "-w",
            "-l",
            str(directory / "server.log"),
            "-o",
            f"-p {port} -k {directory} -c listen_addresses=127.0.0.1",
            "start",
        ]
    )
    return PostgresHandle(
        url=f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", directory=directory / "data"
    )


def unique_name(prefix: str) -> str:
    """A topic or group name no other test uses: tests never interfere."""
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


# -- doubles for users' handler tests --------------------------------------------------------


class FakeMessage:
    """Quacks like ``confluent_kafka.Message`` for :class:`FakeConsumer`."""

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp_ms: int = 0,
    ) -> None:
        self._t, self._p, self._o = topic, partition, offset
        self._k, self._v, self._h, self._ts = key, value, headers or [], timestamp_ms

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> list[tuple[str, bytes]]:
        return self._h

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def error(self) -> None:
        return None


class FakeConsumer:
    """An in-memory consumer for unit tests of handlers and the runtime.

    Holds per-partition logs; ``consume`` returns records from the current positions of
    unpaused partitions; ``commit`` records committed offsets (``fail_commits`` makes it fail);
    an asynchronous commit's result goes to the ``on_commit`` callback of ``conf`` at the next
    ``consume``/``poll``, as librdkafka serves it (``hold_answers`` keeps them back: a commit
    still in flight); ``seek``/``pause``/``resume`` behave like librdkafka's. Not a broker:
    integration tests use the real one.
    """

    def __init__(self, conf: dict[str, Any] | None = None) -> None:
        self.conf = dict(conf or {})
        self.logs: dict[tuple[str, int], list[FakeMessage]] = {}
        self.position: dict[tuple[str, int], int] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()
        self.fail_commits: Any = None  # a KafkaError to raise from commit, or None
        self.commit_calls = 0
        self.commit_modes: list[str] = []
        self.closed = False
        self.member_id: str | None = None  # what ``memberid()`` answers
        self.answers: list[tuple[Any, list[Any]]] = []  # async commits' results, not yet served
        self.hold_answers = False

    def memberid(self) -> str | None:
        return self.member_id

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> FakeMessage:
        log = self.logs.setdefault((topic, partition), [])
        msg = FakeMessage(topic, partition, len(log), key, value, headers)
        log.append(msg)
        self.position.setdefault((topic, partition), self.committed.get((topic, partition), 0))
        return msg

    def subscribe(self, topics: list[str], **_callbacks: Any) -> None:
        self.topics = topics

    def serve_answers(self) -> None:
        """Hand the asynchronous commits' results to ``on_commit`` (``consume`` does)."""
        on_commit = self.conf.get("on_commit")
        while self.answers and not self.hold_answers:
            err, tps = self.answers.pop(0)
            if on_commit is not None:
                on_commit(err, tps)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[FakeMessage]:
        self.serve_answers()
        out: list[FakeMessage] = []
        for tp, log in sorted(self.logs.items()):
            if tp in self.paused:
                continue
            pos = self.position.get(tp, 0)
            take = log[pos : pos + num_messages - len(out)]
            out.extend(take)
            self.position[tp] = pos + len(take)
            if len(out) >= num_messages:
                break
        return out

    def poll(self, timeout: float = -1) -> FakeMessage | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def commit(
        self, offsets: list[Any] | None = None, asynchronous: bool = True
    ) -> list[Any] | None:
        """Like librdkafka's: a synchronous commit raises on failure and returns the offsets;
        an asynchronous one returns None and a failure leaves the offsets uncommitted (the
        real client reports it later through ``on_commit``). ``commit_modes`` logs each call."""
        from confluent_kafka import KafkaException

        self.commit_calls += 1
        self.commit_modes.append("async" if asynchronous else "sync")
        if self.fail_commits is not None:
            if asynchronous:
                self.answers.append((self.fail_commits, list(offsets or [])))
                return None
            raise KafkaException(self.fail_commits)
        if asynchronous:
            self.answers.append((None, list(offsets or [])))
        for tp in offsets or []:
            self.committed[(tp.topic, tp.partition)] = tp.offset
        return None if asynchronous else list(offsets or [])

    def seek(self, tp: Any) -> None:
        self.position[(tp.topic, tp.partition)] = tp.offset

    def pause(self, tps: list[Any]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in tps)

    def resume(self, tps: list[Any]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in tps)

    def close(self) -> None:
        self.closed = True


@dataclass
class PullInbox:
    """A gateway inbox handler (pull mains, callback workers), built as the gateway builds it (see
    :func:`pull_inbox`); ``close()`` stops its verify threads and its injection queue."""

    handler: Any  # pipeline.gateway.inbound.InboxHandler
    dead_letters: Any  # pipeline.gateway.dead_letter_outbox.OutboxDeadLetterSink
    closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for close in self.closers:
            close()


def pull_inbox(
    engine: Any,
    *,
    host: str,
    topics: Any,
    trust: Any,
    mains: tuple[str, ...],
    senders: dict[str, str],
    verify_threads: int = 1,
    pairing: Any = None,
    workers: dict[str, Any] | None = None,
) -> PullInbox:
    """The gateway's ``InboxHandler`` for ``mains`` (all pull delivery) on ``engine``, without
    the gateway around it: for tests and benches that drive a ``ConsumerRuntime`` themselves.
    ``senders`` is the signed presence (gid -> host) of the other side; ``verify_threads`` > 1
    verifies each batch across a thread pool, as the gateway does; ``pairing`` (a
    :class:`~pipeline.envelope.Pairing`) turns the pairwise MAC mode on. ``workers``
    (gid -> callback) adds inject-delivery workers, each injected through its callback: the
    forward path."""
    from prometheus_client import CollectorRegistry

    from pipeline.envelope import BatchVerifier, BoundedSeenSet, Signer, Verifier
    from pipeline.gateway.dead_letter_outbox import OutboxDeadLetterSink
    from pipeline.gateway.entities import LocalEntities
    from pipeline.gateway.inbound import InboxHandler
    from pipeline.gateway.injection import InjectionQueue
    from pipeline.gateway.metrics import GatewayMetrics
    from pipeline.host.conversations import Conversations
    from pipeline.host.entity_config import EntityConfig, InjectorSpec
    from pipeline.host.gateway_config import GatewayConfig
    from pipeline.host.outbound import Publisher
    from pipeline.presence import StaticPresence
    from pipeline.presence.model import Delivery, Role
    from pipeline.store import read_sessions, session_factory

    callbacks = dict(workers or {})
    sessions = session_factory(engine)
    seen = BoundedSeenSet()
    verifier = Verifier(
        host=host,
        trust=trust,
        presence=StaticPresence({**senders, **dict.fromkeys((*mains, *callbacks), host)}),
        seen=seen,
        topics=topics,
        pairing=pairing,
    )
    config = GatewayConfig(
        host=host,
        bootstrap="unused:0",
        entities=(
            *(EntityConfig(gid=g, role=Role.MAIN, delivery=Delivery.PULL) for g in mains),
            *(
                EntityConfig(
                    gid=g,
                    role=Role.WORKER,
                    delivery=Delivery.INJECT,
                    injector=InjectorSpec(type="callback", callback=g),
                )
                for g in callbacks
            ),
        ),
    )
    metrics = GatewayMetrics(CollectorRegistry())
    publisher = Publisher(host=host, signer=Signer.generate(host), topics=topics)
    entities = LocalEntities.from_config(config, callbacks=callbacks)
    injections = InjectionQueue(
        entities=entities, sessions=sessions, publisher=publisher, metrics=metrics
    )
    batch = BatchVerifier(verifier, threads=verify_threads) if verify_threads > 1 else None
    handler = InboxHandler(
        host=host,
        verifier=verifier,
        entities=entities,
        publisher=publisher,
        conversations=Conversations(sessions),
        injections=injections,
        reads=read_sessions(engine),
        metrics=metrics,
        seen=seen,
        batch_verifier=batch,
    )
    closers: list[Any] = [injections.stop] + ([batch.close] if batch is not None else [])
    return PullInbox(handler, OutboxDeadLetterSink(topics=topics, gateway=host), closers)


@dataclass(frozen=True)
class OneHost:
    """A gateway client of host ``A`` (entity ``main-a``, pull) on a SQLite store whose roster
    knows ``main-b`` on host ``B``: sends are staged as the gateway stages them, no broker."""

    client: Any  # pipeline.gateway.client.GatewayClient
    engine: Any  # sqlalchemy.Engine
    config: Any  # pipeline.host.gateway_config.GatewayConfig
    store_url: str
    key_file: Path


def one_host(directory: Path) -> OneHost:
    """Build :class:`OneHost` in ``directory`` (``A.sqlite``, ``A.key``): unit tests of the
    send path and ``python -m bench sends``."""
    from pipeline.bootstrap.client import build_client
    from pipeline.host import roster_cache
    from pipeline.host.entity_config import EntityConfig
    from pipeline.presence.roles import Delivery, Role
    from pipeline.store import make_engine, session_factory

    from .rig import Rig

    rig = Rig(root=directory)
    engine = make_engine(rig.store_url("A"))
    with session_factory(engine).begin() as s:
        entry = roster_cache.RosterEntry("main-b", "B", "main", "pull", (), 10**15)
        roster_cache.replace_all(s, [entry])
    signer = rig.write_keys(["A"])["A"]
    main_a = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    cfg = rig.config("A", [main_a], trust_dir=None)
    client = build_client(cfg, signer=signer, engine=engine)
    return OneHost(
        client=client,
        engine=engine,
        config=cfg,
        store_url=cfg.store_url,
        key_file=rig.key_file("A"),
    )
