"""A local KRaft cluster of 1 or 3 combined nodes on 127.0.0.1, for users and for tests.

State lives in ``<dir>/cluster.json`` so ``fleet kafka status`` and ``fleet kafka down`` can find
brokers that ``fleet kafka up`` left running, and so a crashed test run's brokers are reaped by the
next start in the same folder instead of lingering.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import BrokerNotReady, ConfigError, LauncherError
from pipeline.kafka.logs import LIBRDKAFKA_LOG
from pipeline.reasons import Launcher
from pipeline.support.processes import pid_alive

from .classpath import KAFKA_VERSION, BrokerClasspath, resolve_classpath
from .java import find_java
from .node import KafkaNode, NodeSpec
from .ports import ensure_free, free_ports
from .secure import ADMIN, OAuthValidation, SecureBroker

STATE_FILE = "cluster.json"


def new_cluster_id() -> str:
    """16 random bytes, URL-safe base64 without padding, never starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def default_cluster_dir() -> Path:
    env = os.environ.get("FLEET_KAFKA_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "fleet-pipeline" / "kafka"


@dataclass(frozen=True, kw_only=True)
class LauncherConfig:
    """What to start. ``port`` fixes the first broker port; ``None`` picks free ports."""

    directory: Path
    nodes: int = 1
    kafka_version: str = KAFKA_VERSION
    java: str | None = None
    port: int | None = None
    heap_mb: int = 512
    ready_timeout_s: float = 90.0
    cache_dir: Path | None = None
    extra_properties: Mapping[str, str] = field(default_factory=dict)
    # None: a PLAINTEXT listener. A tuple (maybe empty): SASL_SSL with one login per host plus
    # `admin` (``secure.py``, docs/security.md)
    secure_hosts: tuple[str, ...] | None = None
    # with secure_hosts: an MTLS listener and a certificate per name; an OAUTH listener
    # validating tokens of this issuer (secure.py, docs/security.md)
    mtls_clients: tuple[str, ...] = ()
    oauth: OAuthValidation | None = None
    # name -> (bind port, advertised port), one node only: see NodeSpec.extra_listeners
    extra_listeners: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.nodes not in (1, 3):
            raise ConfigError(f"--nodes must be 1 or 3, got {self.nodes}")
        if self.extra_listeners and self.nodes != 1:
            raise ConfigError("extra listeners are for a one-node cluster")
        if (self.mtls_clients or self.oauth) and self.secure_hosts is None:
            raise ConfigError("the MTLS and OAUTH listeners are for a secured cluster")


class LocalCluster:
    """Start, inspect, fault and stop a local KRaft cluster. See ``docs/local-kafka.md``."""

    def __init__(self, config: LauncherConfig, *, owned: bool = False) -> None:
        self.config = config
        self.owned = owned
        self.nodes: list[KafkaNode] = []
        self.cluster_id = ""
        self.classpath: BrokerClasspath | None = None
        self.secure: SecureBroker | None = None
        # The process that started the cluster. A test run that is still alive owns its brokers:
        # the stale-broker reaper must never take them.
        self.owner_pid = os.getpid()

    # -- start -------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self.config.directory

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.spec.port}" for n in self.nodes)

    def listener_bootstrap(self, name: str) -> str:
        """The bootstrap servers of a secured cluster's MTLS or OAUTH listener."""
        return ",".join(f"127.0.0.1:{n.spec.secure_ports[name]}" for n in self.nodes)

    def client_config(self, user: str = ADMIN) -> dict[str, Any]:
        """librdkafka settings to reach this cluster (as ``user`` when it is secured)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": LIBRDKAFKA_LOG,
        }
        if self.secure is not None:
            conf.update(self.secure.security(user).client_properties())
        return conf

    def start(self) -> LocalCluster:
        cfg = self.config
        java = find_java(cfg.java)
        reap_stale(cfg.directory)
        if cfg.port is not None:
            ports = [cfg.port + i for i in range(cfg.nodes)]
            for p in ports:
                ensure_free(p, what="a Kafka broker listener")
            controller_ports = free_ports(cfg.nodes)
        else:
            allocated = free_ports(2 * cfg.nodes)
            ports, controller_ports = allocated[: cfg.nodes], allocated[cfg.nodes :]
        self.classpath = resolve_classpath(kafka_version=cfg.kafka_version, cache_dir=cfg.cache_dir)
        self.cluster_id = new_cluster_id()
        voters = ",".join(f"{i + 1}@127.0.0.1:{cp}" for i, cp in enumerate(controller_ports))
        cfg.directory.mkdir(parents=True, exist_ok=True)
        for old in cfg.directory.glob("node-*"):
            # `up` always starts a fresh cluster: a new cluster id cannot reuse old storage.
            shutil.rmtree(old, ignore_errors=True)
        if cfg.secure_hosts is not None:
            shutil.rmtree(cfg.directory / "secure", ignore_errors=True)
            self.secure = SecureBroker.create(
                cfg.directory / "secure",
                cfg.secure_hosts,
                mtls_clients=cfg.mtls_clients,
                oauth=cfg.oauth,
            )
        names = self.secure.listeners if self.secure is not None else ()
        listener_ports = free_ports(len(names) * cfg.nodes) if names else []
        for i in range(cfg.nodes):
            spec = NodeSpec(
                node_id=i + 1,
                port=ports[i],
                controller_port=controller_ports[i],
                directory=cfg.directory / f"node-{i + 1}",
                voters=voters,
                replication=cfg.nodes,
                heap_mb=cfg.heap_mb,
                extra_properties=cfg.extra_properties,
                secure=self.secure,
                secure_ports={n: listener_ports[i * len(names) + j] for j, n in enumerate(names)},
                extra_listeners=cfg.extra_listeners,
            )
            node = KafkaNode(spec, java=java, classpath=self.classpath, owned=self.owned)
            node.write_config()
            self.nodes.append(node)
        if self.secure is not None:
            self.secure.write_client_files(self.bootstrap_servers)
        with ThreadPoolExecutor(max_workers=cfg.nodes) as pool:
            list(pool.map(lambda n: n.format(self.cluster_id), self.nodes))
        for node in self.nodes:
            node.start()
        self._write_state()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float | None = None, *, brokers: int | None = None) -> None:
        """Poll metadata until ``brokers`` (default: all running) answer, or fail with log tails."""
        from confluent_kafka.admin import AdminClient

        wanted = brokers if brokers is not None else sum(1 for n in self.nodes if n.is_running())
        deadline = time.monotonic() + (timeout or self.config.ready_timeout_s)
        admin = AdminClient({**self.client_config(), "log_level": 0})
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            for node in self.nodes:
                code = node.exit_code()
                if node.pid is not None and code is not None and code != -1:
                    raise BrokerNotReady(
                        f"Kafka node {node.spec.node_id} exited with code {code} before it was "
                        f"ready.\n{node.log_tail()}",
                        retriable=False,
                    )
            try:
                md = admin.list_topics(timeout=1.0)
                if len(md.brokers) >= wanted and md.controller_id is not None:
                    return
                last_error = f"{len(md.brokers)} of {wanted} brokers visible"
            except Exception as exc:  # noqa: BLE001 - any client error means "not yet"
                last_error = str(exc)
            time.sleep(0.25)
        tails = "\n".join(n.log_tail() for n in self.nodes)
        raise BrokerNotReady(
            f"Kafka at {self.bootstrap_servers} did not become ready within "
            f"{timeout or self.config.ready_timeout_s:.0f}s ({last_error}).\n{tails}"
        )

    # -- state -------------------------------------------------------------------------------
    def version(self) -> str | None:
        for node in self.nodes:
            line = node.version_line()
            if line:
                return line
        return None

    def state(self) -> dict[str, Any]:
        return {
            "owner_pid": self.owner_pid,
            "cluster_id": self.cluster_id,
            "kafka_version": self.config.kafka_version,
            "bootstrap_servers": self.bootstrap_servers,
            "directory": str(self.directory),
            "secure": str(self.secure.folder / "client.json") if self.secure else None,
            "nodes": [
                {
                    "node_id": n.spec.node_id,
                    "port": n.spec.port,
                    "controller_port": n.spec.controller_port,
                    "pid": n.pid,
                    "running": n.is_running(),
                    "directory": str(n.directory),
                }
                for n in self.nodes
            ],
        }

    def _write_state(self) -> None:
        path = self.directory / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state(), indent=2))
        tmp.replace(path)

    @classmethod
    def attach(cls, directory: Path) -> LocalCluster:
        """Rebuild a handle on a cluster some other process started in ``directory``."""
        path = directory / STATE_FILE
        if not path.exists():
            raise ConfigError(
                f"no local Kafka cluster recorded in {directory} (no {STATE_FILE})",
                reason=Launcher.NO_CLUSTER,
            )
        data = json.loads(path.read_text())
        nodes_data = data["nodes"]
        cluster = cls(
            LauncherConfig(
                directory=directory, nodes=len(nodes_data), kafka_version=data["kafka_version"]
            )
        )
        cluster.cluster_id = data["cluster_id"]
        if data.get("secure"):
            cluster.secure = SecureBroker.load(Path(data["secure"]).parent)
        cluster.owner_pid = int(data.get("owner_pid") or 0)
        java = find_java(None)
        classpath = resolve_classpath(kafka_version=data["kafka_version"])
        cluster.classpath = classpath
        voters = ",".join(f"{n['node_id']}@127.0.0.1:{n['controller_port']}" for n in nodes_data)
        for n in nodes_data:
            spec = NodeSpec(
                node_id=n["node_id"],
                port=n["port"],
                controller_port=n["controller_port"],
                directory=Path(n["directory"]),
                voters=voters,
                replication=len(nodes_data),
                secure=cluster.secure,
            )
            node = KafkaNode(spec, java=java, classpath=classpath, owned=False)
            if n.get("pid"):
                node.adopt(int(n["pid"]))
            cluster.nodes.append(node)
        return cluster

    # -- faults ------------------------------------------------------------------------------
    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.spec.node_id == node_id:
                return n
        raise ConfigError(f"no node {node_id} in this cluster")

    def kill(self, node_id: int) -> None:
        self.node(node_id).kill()

    def pause(self, node_id: int) -> None:
        self.node(node_id).pause()

    def resume(self, node_id: int) -> None:
        self.node(node_id).resume()

    def restart(self, node_id: int, *, wait: bool = True) -> None:
        node = self.node(node_id)
        node.stop()
        node.start()
        self._write_state()
        if wait:
            self.wait_ready()

    def stop_all(self, timeout: float = 15.0) -> None:
        """Stop every node but keep the data (``start_again`` brings the same cluster back)."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(lambda n: n.stop(timeout), self.nodes))
        if (self.directory / STATE_FILE).exists():
            self._write_state()

    def start_again(self, *, wait: bool = True) -> None:
        for n in self.nodes:
            n.start()
        self._write_state()
        if wait:
            self.wait_ready()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every node (SIGTERM, SIGKILL after ``timeout``) and forget the state file."""
        self.stop_all(timeout)
        (self.directory / STATE_FILE).unlink(missing_ok=True)

    def leader_of(self, topic: str, partition: int = 0, *, timeout: float = 30.0) -> int:
        """The node leading ``topic[partition]``; waits (bounded) for a just-created topic's
        metadata to reach the node we ask and for its leader to be elected."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.client_config())
        deadline = time.monotonic() + timeout
        while True:
            md = admin.list_topics(topic=topic, timeout=10)
            meta = md.topics.get(topic)
            part = meta.partitions.get(partition) if meta is not None else None
            if part is not None and part.leader >= 0:
                return int(part.leader)
            if time.monotonic() > deadline:
                raise BrokerNotReady(
                    f"no leader for {topic}[{partition}] after {timeout:.0f}s", retriable=True
                )
            time.sleep(0.1)


def reap_stale(directory: Path) -> int:
    """Kill brokers a crashed run left behind in ``directory``; returns how many were reaped."""
    path = directory / STATE_FILE
    if not path.exists():
        return 0
    try:
        stale = LocalCluster.attach(directory)
    except Exception:  # noqa: BLE001 - unreadable state: nothing safe to kill
        path.unlink(missing_ok=True)
        return 0
    running = [n for n in stale.nodes if n.is_running()]
    owner = stale.owner_pid
    if running and owner and owner != os.getpid() and owned_by_live_process(stale):
        raise LauncherError(
            f"a local Kafka cluster in {directory} belongs to the running process {owner}; "
            "use another --dir (or stop that process)",
            reason=Launcher.CLUSTER_IN_USE,
            context={"owner_pid": owner},
        )
    stale.stop(timeout=10)
    return len(running)


def owned_by_live_process(cluster: LocalCluster) -> bool:
    """True when the process that started ``cluster`` still runs and still owns its JVMs.

    ``fleet kafka up`` exits after starting detached brokers, so its clusters have no live owner
    and a later ``up`` replaces them; a test run's brokers die with it (PDEATHSIG) and are safe
    from other runs while it lives.
    """
    pid = cluster.owner_pid
    if pid <= 0 or pid == os.getpid():
        return False
    return pid_alive(pid)
