"""One KRaft node (combined broker + controller) as a child JVM process.

A node owns a folder: ``server.properties``, ``log4j2.properties``, ``data/`` (the log dir),
``logs/server.log`` and ``stdout.log``. It can be started, stopped (SIGTERM then SIGKILL after a
bound), killed with SIGKILL, paused (SIGSTOP), resumed (SIGCONT) and restarted on the same data:
the fault tests of later issues drive exactly these.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import LauncherError
from pipeline.reasons import Launcher
from pipeline.support import procfs

from .classpath import BrokerClasspath
from .java import JavaRuntime
from .secure import SecureBroker

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {logdir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache
logger.apache.level = WARN
logger.appinfo.name = org.apache.kafka.common.utils.AppInfoParser
logger.appinfo.level = INFO
"""

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL the JVM if the process that launched it dies (crashed test run)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(kw_only=True)
class NodeSpec:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    voters: str
    replication: int
    heap_mb: int = 512
    extra_properties: Mapping[str, str] = field(default_factory=dict)
    secure: SecureBroker | None = None  # SASL_SSL + mTLS controller + StandardAuthorizer
    secure_ports: Mapping[str, int] = field(default_factory=dict)  # MTLS / OAUTH -> port
    # name -> (bind port, advertised port): a PLAINTEXT listener a client reaches through
    # something else (the chaos suite's TCP proxy, docs/chaos.md #11)
    extra_listeners: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def properties(self) -> dict[str, str]:
        rf = str(self.replication)
        min_isr = "2" if self.replication >= 3 else "1"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.retention.check.interval.ms": "5000",
            "unclean.leader.election.enable": "false",
        }
        if self.secure is not None:
            props.update(
                self.secure.node_properties(
                    self.port, self.controller_port, dict(self.secure_ports)
                )
            )
        for name, (bind, advertised) in self.extra_listeners.items():
            props["listeners"] += f",{name}://127.0.0.1:{bind}"
            props["advertised.listeners"] += f",{name}://127.0.0.1:{advertised}"
            props["listener.security.protocol.map"] += f",{name}:PLAINTEXT"
        props.update(self.extra_properties)
        return props


class KafkaNode:
    """A combined broker+controller JVM. Not thread-safe; one owner drives it."""

    def __init__(
        self, spec: NodeSpec, *, java: JavaRuntime, classpath: BrokerClasspath, owned: bool
    ) -> None:
        self.spec = spec
        self.java = java
        self.classpath = classpath
        self.owned = owned  # owned=True: the JVM dies with this Python process
        self.process: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    # -- files -------------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return self.spec.directory

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def server_log(self) -> Path:
        return self.directory / "logs" / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.directory / "stdout.log"

    def write_config(self) -> None:
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        lines = [f"{k}={v}" for k, v in self.spec.properties().items()]
        # 0600: a secured node's file holds the admin login it uses between brokers
        self.properties_file.unlink(missing_ok=True)
        fd = os.open(self.properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        (self.directory / "log4j2.properties").write_text(
            _LOG4J2.format(logdir=self.directory / "logs")
        )

    def _jvm(self, main: str, *args: str) -> list[str]:
        system = self.spec.secure.jvm_properties() if self.spec.secure is not None else {}
        return [
            self.java.executable,
            f"-Xms{min(256, self.spec.heap_mb)}m",
            f"-Xmx{self.spec.heap_mb}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            *(f"-D{key}={value}" for key, value in system.items()),
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.directory / 'logs'}",
            "-cp",
            self.classpath.classpath,
            main,
            *args,
        ]

    def format(self, cluster_id: str) -> None:
        cmd = self._jvm(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self.properties_file),
            "--ignore-formatted",
            *(self.spec.secure.scram_args() if self.spec.secure is not None else ()),
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).strip()[-2000:]
            if self.spec.secure is not None:
                output = self.spec.secure.redact(output)
            raise LauncherError(
                f"formatting KRaft storage for node {self.spec.node_id} failed:\n{output}",
                reason=Launcher.STORAGE_FORMAT_FAILED,
            )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.is_running():
            return
        out = self.stdout_log.open("ab")
        try:
            self.process = subprocess.Popen(
                self._jvm("kafka.Kafka", str(self.properties_file)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.owned else None,  # noqa: PLW1509
            )
        finally:
            out.close()
        self._pid = self.process.pid

    @property
    def pid(self) -> int | None:
        return self._pid

    def adopt(self, pid: int) -> None:
        """Drive a JVM started by another process (``fleet kafka down`` after ``up``)."""
        self._pid = pid
        self.process = None

    def exit_code(self) -> int | None:
        if self.process is not None:
            return self.process.poll()
        return None if self.is_running() else -1

    def is_running(self) -> bool:
        if self._pid is None:
            return False
        if self.process is not None:
            return self.process.poll() is None
        return _pid_is_our_broker(self._pid, self.properties_file)

    def _signal(self, sig: signal.Signals) -> None:
        if self._pid is not None and self.is_running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, sig)

    def kill(self) -> None:
        """SIGKILL: the crash the fault tests need. Waits until the process is gone."""
        self._signal(signal.SIGKILL)
        self._wait_gone(10)

    def pause(self, bound_s: float = 5.0) -> None:
        """SIGSTOP, then wait until every thread of the JVM has stopped: ``kill`` returns while
        threads still run (measured on a 108-thread broker: a third of pauses had threads
        running at the first look, for up to 22 ms), long enough for a network thread to answer
        a request sent "after" the pause."""
        self._signal(signal.SIGSTOP)
        if self._pid is None:
            return
        deadline = time.monotonic() + bound_s
        while not procfs.all_threads_stopped(self._pid) and time.monotonic() < deadline:
            time.sleep(0.001)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (resuming a paused JVM first), then SIGKILL after ``timeout`` seconds."""
        if not self.is_running():
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        if not self._wait_gone(timeout):
            self._signal(signal.SIGKILL)
            self._wait_gone(10)

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None:
                try:
                    self.process.wait(timeout=0.1)
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if not self.is_running():
                return True
            time.sleep(0.1)
        return not self.is_running()

    def log_tail(self, lines: int = 30) -> str:
        chunks = []
        for path in (self.server_log, self.stdout_log):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()
                chunks.append(f"--- {path} (last {lines} lines) ---")
                chunks.extend(text[-lines:])
        return "\n".join(chunks) if chunks else "(no broker log written)"

    def version_line(self) -> str | None:
        if not self.server_log.exists():
            return None
        for line in self.server_log.read_text(errors="replace").splitlines():
            if "Kafka version:" in line:
                return line.split("Kafka version:", 1)[1].split("(")[0].strip()
        return None


def _pid_is_our_broker(pid: int, properties_file: Path) -> bool:
    """True when ``pid`` is alive and is a Kafka JVM started on ``properties_file``."""
    args, stat = procfs.cmdline(pid), procfs.proc_stat(pid)
    if args is None or stat is None or stat.state == "Z":
        return False
    return b"kafka.Kafka" in args and str(properties_file).encode() in args
