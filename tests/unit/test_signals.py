"""``pipeline.signals.stop_on_signals``: a stop signal never takes a lock in its handler.

Found by the ``twin-host`` chaos scenario (docs/chaos.md) at 20 repetitions: a ``fleet gateway run`` ignored SIGTERM for
20 s until SIGKILL; faulthandler's dump (SIGUSR2) showed the main thread in ``Event.set``
inside ``Event.set``: a second SIGTERM's handler ran while the first one's ``set()`` held the
event's non-reentrant lock. A handler runs on the main thread between any two bytecodes, so
whenever that thread holds the event's lock (inside ``set``, or ``wait`` re-taking it) a
handler that calls ``set()`` deadlocks the process.

Each case runs in a child interpreter (handlers are process-wide; a deadlock must end the test,
not hang it): the bound is a hang detector, not a timing claim."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

HANG_BOUND_S = 60.0


def run_child(body: str) -> subprocess.CompletedProcess[str]:
    code = "import os, signal, threading\nfrom pipeline.signals import stop_on_signals\n"
    return subprocess.run(
        [sys.executable, "-c", code + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_S,
        check=False,
    )


def test_the_handler_returns_while_the_main_thread_holds_the_events_lock() -> None:
    """Deterministic form of the deadlock: the handler called with the event's lock held by
    the main thread (where a signal landing inside ``Event.set`` leaves it). A handler calling
    ``stop.set()`` blocks forever here."""
    done = run_child(
        """
        stop = threading.Event()
        stop_on_signals(stop)
        handler = signal.getsignal(signal.SIGTERM)
        with stop._cond:  # the Event's own lock, taken as Event.set/Event.wait take it
            handler(signal.SIGTERM, None)
        assert stop.wait(30), "the event was never set"
        print("stopped")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"


def test_a_real_signal_sets_the_event_and_a_flood_of_them_is_absorbed() -> None:
    """SIGTERM and SIGINT both stop; 70,000 more deliveries (more than a pipe buffer holds)
    neither block the handler nor raise."""
    done = run_child(
        """
        for sig in (signal.SIGTERM, signal.SIGINT):
            stop = threading.Event()
            stop_on_signals(stop)
            os.kill(os.getpid(), sig)
            assert stop.wait(30), f"{sig} did not stop"
        handler = signal.getsignal(signal.SIGTERM)
        for _ in range(70_000):
            handler(signal.SIGTERM, None)
        print("absorbed")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "absorbed"


def test_a_burst_of_sigterms_stops_a_busy_process() -> None:
    """The shape of the field failure: GIL-busy threads, a main thread waiting on the event in
    short slices, SIGTERMs 1 ms apart (a supervisor's terminate, then its stop)."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import signal, sys, threading
                from pipeline.signals import stop_on_signals
                sys.setswitchinterval(0.001)
                def busy():
                    while True:
                        sum(range(1000))
                for _ in range(3):
                    threading.Thread(target=busy, daemon=True).start()
                stop = threading.Event()
                stop_on_signals(stop)
                print("ready", flush=True)
                while not stop.wait(0.0005):
                    pass
                # the rest of the burst must not reach interpreter shutdown, which puts a
                # Python handler back to SIG_DFL (the parent signals until the child is gone)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                print("stopped", flush=True)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        for _ in range(200):
            if child.poll() is not None:
                break
            os.kill(child.pid, signal.SIGTERM)
            time.sleep(0.001)
        assert child.wait(HANG_BOUND_S) == 0
        assert child.stdout.read().strip() == "stopped"
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_interrupt_on_sigterm_runs_the_clean_up_and_a_second_sigterm_cannot_cut_it_short() -> None:
    """``fleet chaos run`` / ``fleet lab run``: the first SIGTERM raises KeyboardInterrupt in the
    main thread, so ``finally`` stops the children; more SIGTERMs during that clean-up (a
    supervisor's terminate, then its stop) are ignored instead of interrupting it again."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import os, signal, time
                from pipeline.signals import interrupt_on_sigterm
                interrupt_on_sigterm()
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(30)
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
                finally:
                    os.kill(os.getpid(), signal.SIGTERM)  # a second one, mid clean-up
                    time.sleep(0.2)
                    print("cleaned up", flush=True)
                """
            ),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_BOUND_S,
        check=False,
    )
    assert out.stdout.split() == ["interrupted", "cleaned", "up"], out.stderr
    assert out.returncode == 0, out.stderr


def test_what_does_not_wait_on_the_event_is_woken_after_it_is_set() -> None:
    """``then``: ``fleet relay run`` wakes its relay and its commit watch (docs/outbox.md
    invariant 9), which wait on other things than the event; each call comes after the set."""
    done = run_child(
        """
        stop = threading.Event()
        seen = []
        woke = threading.Event()
        stop_on_signals(stop, then=[lambda: seen.append(stop.is_set()), woke.set])
        os.kill(os.getpid(), signal.SIGTERM)
        assert woke.wait(30), "the wakes never came"
        print(seen)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True]"
