"""pipeline/support/procfs.py: the one /proc reader, on canned lines and on this process."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from pipeline.support import procfs

# proc(5) layout; the command name holds spaces and both parentheses, as a thread may name itself
CANNED = (
    "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 "
    "250 50 7 3 20 0 9 0 12345 1000000 500 18446744073709551615"
)


def test_a_stat_line_is_read_after_the_last_parenthesis() -> None:
    stat = procfs.parse_stat(CANNED)
    assert stat is not None
    assert stat.state == "S"
    assert (stat.utime, stat.stime, stat.cutime, stat.cstime) == (250, 50, 7, 3)
    assert stat.cpu_s == pytest.approx(300 / procfs.CLK_TCK)
    assert stat.cpu_with_children_s == pytest.approx(310 / procfs.CLK_TCK)


def test_a_cut_or_malformed_stat_line_is_no_figure() -> None:
    assert procfs.parse_stat("4242 (cut") is None
    assert procfs.parse_stat("4242 (x) R 1 2 3") is None
    assert procfs.parse_stat(CANNED.replace(" 250 ", " x ")) is None


def test_the_machine_line_counts_iowait_as_idle_and_guest_time_once() -> None:
    line = "cpu  100 5 40 800 20 0 3 0 9 0"  # user nice system idle iowait irq softirq steal guest
    cpu = procfs.parse_machine(line)
    assert cpu == procfs.MachineCpu(total=968, idle=820)
    assert cpu.busy == 148
    assert procfs.parse_machine("cpu 1 2") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_this_process_is_read_live_and_a_gone_one_is_none() -> None:
    before = procfs.cpu_s(os.getpid())
    spent0 = time.process_time()
    while time.process_time() - spent0 < 0.2:
        pass
    after = procfs.cpu_s(os.getpid())
    assert before is not None and after is not None and after - before >= 0.1
    stat = procfs.proc_stat(os.getpid())
    assert stat is not None and stat.state == "R"  # this thread is running: it reads the file
    assert not procfs.all_threads_stopped(os.getpid())
    # argv[0] as started (``.venv/bin/python`` or absolute); sys.executable is made absolute
    argv0 = (procfs.cmdline(os.getpid()) or [b""])[0].decode()
    assert os.path.basename(argv0) == os.path.basename(sys.executable)
    m = procfs.machine_cpu()
    assert m is not None and m.total > m.idle
    gone = 2**22 + 1  # above pid_max's default ceiling: no such process
    assert procfs.cpu_s(gone) is None and procfs.cmdline(gone) is None
    assert procfs.all_threads_stopped(gone)  # gone counts as stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_listener_of_a_port_is_found_and_an_unused_port_is_not() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert procfs.listener_pid(port) == os.getpid()
    assert procfs.listener_pid(port) is None


def test_a_thread_put_on_a_cpu_again_after_each_sleep_is_counted() -> None:
    """Each wake from a sleep puts the thread on a CPU once more: ten sleeps add at least ten
    (``bench.cpu`` reads a gateway's wakes a second from this); a gone thread is None."""
    import threading

    tid = threading.get_native_id()
    before = procfs.thread_runs(os.getpid(), tid)
    if before is None:
        pytest.skip("this kernel keeps no schedstat")
    for _ in range(10):
        time.sleep(0.001)
    after = procfs.thread_runs(os.getpid(), tid)
    assert after is not None
    assert after[1] - before[1] >= 10
    assert after[0] >= before[0] >= 0.0
    assert procfs.thread_runs(os.getpid(), 2**22 + 1) is None
