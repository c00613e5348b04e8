"""``pipeline.support.sd_notify``: the datagram systemd reads for ``Type=notify`` units, sent to
a real ``AF_UNIX`` datagram socket (a path and an abstract name), and the silence without one."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.observability.health import Health, notify_when_ready
from pipeline.support import sd_notify


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket, as systemd's notify socket (a short path: AF_UNIX's limit)."""
    folder = tempfile.mkdtemp(prefix="sdn-")
    path = str(Path(folder) / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    yield sock, path
    sock.close()
    shutil.rmtree(folder, ignore_errors=True)


def test_ready_and_stopping_arrive_as_datagrams(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    env = {"NOTIFY_SOCKET": path}
    assert sd_notify.ready("gateway A", environ=env)
    assert sock.recv(4096) == b"READY=1\nSTATUS=gateway A"
    assert sd_notify.stopping(environ=env)
    assert sock.recv(4096) == b"STOPPING=1"


def test_an_abstract_socket_name_is_reached() -> None:
    name = f"fleet-sdn-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        assert sd_notify.ready(environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


@pytest.mark.parametrize("value", [None, "", "relative/path", "vsock:2:1234"])
def test_without_a_notify_socket_nothing_is_sent(value: str | None) -> None:
    env = {} if value is None else {"NOTIFY_SOCKET": value}
    assert sd_notify.notify_address(env) is None
    assert not sd_notify.ready(environ=env)


def test_a_socket_nobody_listens_on_is_reported_not_raised(tmp_path: Path) -> None:
    assert not sd_notify.ready(environ={"NOTIFY_SOCKET": str(tmp_path / "gone")})


def test_ready_is_sent_once_readiness_passes_and_not_before(
    listener: tuple[socket.socket, str],
) -> None:
    sock, path = listener
    joined = threading.Event()
    checked = threading.Event()

    def group() -> str | None:
        checked.set()
        return None if joined.is_set() else "not joined"

    health = Health(ready={"group": group})
    stop = threading.Event()
    thread = notify_when_ready(health, stop, environ={"NOTIFY_SOCKET": path}, poll_s=0.05)
    assert thread is not None
    assert checked.wait(10)
    sock.settimeout(0.3)
    with pytest.raises(TimeoutError):
        sock.recv(4096)  # not ready: nothing said
    joined.set()
    sock.settimeout(10)
    assert sock.recv(4096) == b"READY=1"
    thread.join(10)
    assert not thread.is_alive()


def test_no_thread_without_a_service_manager() -> None:
    assert notify_when_ready(Health(), threading.Event(), environ={}) is None
