"""Launcher failure modes each give a clear message with a stable reason code."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from pipeline.errors import ArtifactUnresolved, BrokerNotReady, JavaNotFound, PortInUse
from pipeline.kafka.local import LauncherConfig, LocalCluster, find_java, resolve_classpath
from pipeline.kafka.local.cluster import new_cluster_id, owned_by_live_process


def test_port_taken_is_refused_before_anything_starts(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        with pytest.raises(PortInUse) as info:
            LocalCluster(LauncherConfig(directory=tmp_path, port=port)).start()
    finally:
        holder.close()
    assert info.value.reason == "PORT_IN_USE"
    assert f"port {port}" in str(info.value) and "already in use" in str(info.value)
    assert not list(tmp_path.glob("node-*")), "nothing may be started when the port is taken"


def test_java_missing(tmp_path: Path) -> None:
    with pytest.raises(JavaNotFound) as info:
        find_java(str(tmp_path / "no-such-java"))
    assert info.value.reason == "JAVA_NOT_FOUND"
    assert "Java not found" in str(info.value) and "17" in str(info.value)


def _fake_java(tmp_path: Path, version: str) -> str:
    script = tmp_path / "java"
    script.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_java_older_than_17_is_refused_with_its_version(tmp_path: Path) -> None:
    with pytest.raises(JavaNotFound) as info:
        find_java(_fake_java(tmp_path, "11.0.2"))
    assert "11.0.2" in str(info.value) and "older than 17" in str(info.value)
    with pytest.raises(JavaNotFound, match="older than 17"):
        find_java(_fake_java(tmp_path, "1.8.0_392"))


def test_java_17_and_newer_accepted(tmp_path: Path) -> None:
    assert find_java(_fake_java(tmp_path, "17.0.15")).major == 17
    assert find_java(_fake_java(tmp_path, "21")).major == 21


def test_unresolvable_artifact_is_named(tmp_path: Path) -> None:
    with pytest.raises(ArtifactUnresolved) as info:
        resolve_classpath(kafka_version="0.0.0-no-such-version", cache_dir=tmp_path)
    msg = str(info.value)
    assert info.value.reason == "ARTIFACT_UNRESOLVED"
    assert "kafka_2.13" in msg and "0.0.0-no-such-version" in msg
    assert not (tmp_path / "kafka_2.13-0.0.0-no-such-version-log4j-2.24.3" / ".complete").exists()


@pytest.mark.own_cluster  # starts brokers of its own
def test_broker_that_never_becomes_ready_quotes_its_log(tmp_path: Path) -> None:
    cluster = LocalCluster(LauncherConfig(directory=tmp_path, ready_timeout_s=0.3), owned=True)
    with pytest.raises(BrokerNotReady) as info:
        cluster.start()
    msg = str(info.value)
    assert "did not become ready" in msg or "exited with code" in msg
    assert ("--- " in msg and "server.log" in msg) or "stdout.log" in msg
    assert all(not n.is_running() for n in cluster.nodes), "a failed start leaves no JVM behind"


@pytest.mark.own_cluster  # starts brokers of its own
def test_broker_that_crashes_at_start_is_reported_with_exit_code(tmp_path: Path) -> None:
    # A listener on a port we hold: the JVM fails to bind and exits; we say so with its log.
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        cluster = LocalCluster(
            LauncherConfig(
                directory=tmp_path,
                extra_properties={
                    "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port}"
                },
                ready_timeout_s=60,
            ),
            owned=True,
        )
        with pytest.raises(Exception) as info:
            cluster.start()
    finally:
        holder.close()
    assert getattr(info.value, "reason", "") in {"BROKER_NOT_READY", "STORAGE_FORMAT_FAILED"}
    assert all(not n.is_running() for n in cluster.nodes)


def test_cluster_ids_are_valid() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") and "=" not in i for i in ids)


@pytest.mark.own_cluster  # starts brokers of its own
def test_a_live_runs_broker_is_never_reaped_by_another_run(tmp_path: Path) -> None:
    """Two test runs on one machine must not take each other's broker (a crashed run's are)."""
    import subprocess
    import sys
    import time

    from pipeline.errors import LauncherError

    ready = tmp_path / "ready"
    script = (
        "import sys, time, pathlib\n"
        "from pipeline.kafka.local import LauncherConfig, LocalCluster\n"
        f"c = LocalCluster(LauncherConfig(directory=pathlib.Path({str(tmp_path / 'k')!r})),"
        " owned=True).start()\n"
        f"pathlib.Path({str(ready)!r}).write_text(c.bootstrap_servers)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 90
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), "the owner process did not start its broker"
        with pytest.raises(LauncherError) as info:
            LocalCluster(LauncherConfig(directory=tmp_path / "k")).start()
        assert info.value.reason == "CLUSTER_IN_USE" and str(owner.pid) in str(info.value)
        attached = LocalCluster.attach(tmp_path / "k")
        assert all(n.is_running() for n in attached.nodes), "the live run's broker survived"
    finally:
        owner.kill()
        owner.wait(10)
    attached = LocalCluster.attach(tmp_path / "k")
    deadline = time.monotonic() + 20
    while any(n.is_running() for n in attached.nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(n.is_running() for n in attached.nodes), "PDEATHSIG took the dead run's JVM"
    assert not owned_by_live_process(attached), "a dead run's folder is free for the next run"


def test_two_processes_asking_at_once_never_get_the_same_broker_folder() -> None:
    """Two pytest-xdist workers (or two runs) start their session brokers at the same moment:
    neither has written a state file yet, so only the folder's flock can tell them apart. A
    folder whose holder died is the stable one again (a crashed run's brokers get reaped)."""
    import subprocess
    import sys
    import uuid

    from pipeline.testing import test_broker_dir

    name = f"claim-{uuid.uuid4().hex[:8]}"
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pipeline.testing import test_broker_dir as d;"
            f" print(d({name!r}), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            held = holder.stdout.readline().strip()
            assert held.endswith(f"/{name}"), held
            # a fallback folder a finished run left behind (a pid above any pid_max: not alive)
            left = Path(held).parent / f"{name}-{os.getpid() + 10_000_000}"
            left.mkdir()
            mine = test_broker_dir(name)
            assert mine.name == f"{name}-{os.getpid()}", "a live holder's folder was handed twice"
            assert not left.exists(), "a dead run's fallback folder was not swept"
        finally:
            holder.kill()
    after = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from pipeline.testing import test_broker_dir as d; print(d({name!r}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert after.stdout.strip() == held, "the dead holder's folder was not given back"
    shutil.rmtree(held, ignore_errors=True)
    shutil.rmtree(mine, ignore_errors=True)
