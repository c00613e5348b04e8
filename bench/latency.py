"""Send -> held and send -> INJECTED latency, two gateways as their own processes.

One run: gateways A and B (``fleet gateway run``, one process per host, as deployed) on one
store type; a sender on host A offers each rate in ``rates`` for ``seconds``: half REPLYs into
``main-b`` (send -> held at B), half briefs into ``worker-b`` through a command injector (send ->
its INJECTED receipt held back at A; ``injector="long-lived"``: one child fed framed briefs,
:mod:`pipeline.gateway.injectors.child`, instead of ``true`` per brief). Latency runs from the sender's call (its wall clock, the
same host's) to ``held_at_ms`` in the receiving store; recorded in an HDR-style histogram.

``sender="socket"`` pipelines the sends to A's gateway over its local socket (the sender never
waits for a commit); ``"socket-sync"`` sends one at a time through it, each waiting for its
answer; ``"direct"`` writes A's store from the sender process, one transaction per send (what
``fleet send`` did before the socket, and still does when no gateway runs).

Trustworthy by construction: timing starts only once both inbox consumer groups are STABLE and a
warm-up message of each kind went all the way through; a slow start is waited out (up to
``start_timeout_s``) and a failed one reports the children's log tails (their output goes to files
in the run's folder, kept when something failed) together with whatever was already measured.

Run alone: ``python -m bench.latency [--direct] [--postgresql] [--repeats N] [--seconds S]
[--injector long-lived]``.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .broker import kafka, local_pid
from .cpu import CpuWindow, postmaster_pid, us_per_message
from .histogram import Histogram

GATEWAYS = ("A", "B")
# the bench never drains main-b: room for every reply of the longest phase it runs
HELD_CAP = 1_000_000


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


class _Run:
    def __init__(
        self,
        bootstrap: str,
        *,
        sender: str,
        store_urls: dict[str, str] | None,
        injector: str = "one-shot",
    ) -> None:
        from pipeline.testing.rig import Rig

        self.injector = injector
        self.bootstrap = bootstrap
        self.sender = sender
        self.root = Path(tempfile.mkdtemp(prefix="fleet-lat-"))
        self.prefix = f"lat{uuid.uuid4().hex[:10]}."
        self.rig = Rig(root=self.root, bootstrap=bootstrap, prefix=self.prefix)
        self.signers = self.rig.write_keys(GATEWAYS)
        self.urls = store_urls or {h: self.rig.store_url(h) for h in GATEWAYS}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def pids(self) -> dict[str, int]:
        """The gateways' processes and, when it runs on this machine, the broker's."""
        out = {f"gateway_{h}": p.pid for h, p in self.procs.items()}
        broker = local_pid(self.bootstrap)
        if broker is not None:
            out["broker"] = broker
        return out

    def config(self, h: str) -> Path:
        return self.root / f"{h}.toml"

    def socket(self, h: str) -> str:
        return str(self.root / f"{h}.sock")

    def start(self) -> None:
        from pipeline.host.entity_config import EntityConfig, InjectorSpec
        from pipeline.presence.roles import Delivery, Role

        main = {
            h: EntityConfig(gid=f"main-{h.lower()}", role=Role.MAIN, delivery=Delivery.PULL)
            for h in GATEWAYS
        }
        worker_b = EntityConfig(
            gid="worker-b",
            role=Role.WORKER,
            delivery=Delivery.INJECT,
            injector=(
                InjectorSpec(type="command", command=("true",))
                if self.injector == "one-shot"
                else InjectorSpec(
                    type="command",
                    command=(sys.executable, "-m", "pipeline.gateway.injectors.child"),
                    mode="long-lived",
                )
            ),
        )
        entities = {"A": (main["A"],), "B": (main["B"], worker_b)}
        for h in GATEWAYS:
            # socket_path only for the socket senders ("direct" writes A's store itself)
            via_socket = self.sender.startswith("socket")
            config = self.rig.config(
                h,
                entities[h],
                store_url=self.urls[h],
                socket_path=self.socket(h) if via_socket else None,
                presence_interval_s=1.0,
                presence_ttl_s=60.0,
                # nobody drains main-b here: at the default cap (10,000 undrained) the 10,001st
                # reply of a run was dead-lettered HELD_CAP_EXCEEDED, as designed
                max_held_per_recipient=HELD_CAP,
            )
            self.rig.write_config(config, self.config(h))
            self.logs[h] = self.root / f"gateway-{h}.log"
            with self.logs[h].open("wb") as log:
                self.procs[h] = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pipeline",
                        "gateway",
                        "run",
                        "--config",
                        str(self.config(h)),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )

    def check_alive(self) -> None:
        for h, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"gateway {h} exited with {p.returncode}")

    def log_tails(self) -> dict[str, str]:
        return {h: _tail(path) for h, path in self.logs.items()}

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def _groups_stable(bootstrap: str, groups: list[str], deadline: float, run: _Run) -> None:
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    while True:
        run.check_alive()
        futures = admin.describe_consumer_groups(groups, request_timeout=10)
        states = {}
        for g, f in futures.items():
            try:
                d = f.result()
                states[g] = (d.state, len(d.members))
            except Exception as exc:  # noqa: BLE001 - not there yet: wait
                states[g] = (str(exc), 0)
        if all(s == ConsumerGroupState.STABLE and n > 0 for s, n in states.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumer groups not stable: {states}")
        time.sleep(0.2)


class _Arrivals:
    """Reads what arrived: held REPLYs at B and INJECTED receipts at A, by msgId."""

    def __init__(self, urls: dict[str, str]) -> None:
        from pipeline.store import make_engine, readonly

        # read-only: on SQLite a plain transaction takes the write lock (BEGIN IMMEDIATE), and a
        # bench polling that way would queue the gateways' writers behind it
        self._own = {h: make_engine(urls[h], create=False) for h in GATEWAYS}
        self.engines = {h: readonly(e) for h, e in self._own.items()}

    def held(self) -> dict[str, int]:
        from sqlalchemy import select

        from pipeline.host.held import held_table

        with self.engines["B"].connect() as c:
            rows = c.execute(
                select(held_table.c.msg_id, held_table.c.held_at_ms).where(
                    held_table.c.recipient == "main-b"
                )
            )
            return {r.msg_id: int(r.held_at_ms) for r in rows}

    def receipts(self) -> dict[str, int]:
        from sqlalchemy import select

        from pipeline.envelope.receipts import read_receipt
        from pipeline.host.held import held_table

        with self.engines["A"].connect() as c:
            rows = c.execute(
                select(held_table.c.body, held_table.c.held_at_ms).where(
                    held_table.c.kind == "INJECTED"
                )
            )
            return {read_receipt("INJECTED", bytes(r.body)).msg_id: int(r.held_at_ms) for r in rows}

    def close(self) -> None:
        for e in self._own.values():
            e.dispose()


class _Pipelined:
    """The socket path as a high-rate sender uses it: requests are written as they are due and
    answers read by a second thread, so the sender never waits for a commit (group commit then
    gathers what arrives while one is running). Same frames as SocketClient."""

    def __init__(self, path: str) -> None:
        import socket
        import threading

        from pipeline.host.socket_protocol import encode_frame, read_frame

        self._encode, self._read = encode_frame, read_frame
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sent = 0
        self.answers: dict[int, dict[str, Any]] = {}
        self._done = threading.Condition()
        self._reader = threading.Thread(target=self._read_all, daemon=True)
        self._reader.start()

    def _read_all(self) -> None:
        try:
            while (answer := self._read(self.sock)) is not None:
                with self._done:
                    self.answers[int(answer["id"])] = answer
                    self._done.notify_all()
        except OSError:
            return

    def send(self, to: str, kind: str) -> int:
        rid = self.sent
        self.sent += 1
        body = {
            "id": rid,
            "op": "send",
            "sender": "main-a",
            "to": to,
            "body": "YmVuY2g=",
            "kind": kind,
        }
        self.sock.sendall(self._encode(body))
        return rid

    def settle(self, timeout_s: float = 60.0) -> None:
        with self._done:
            self._done.wait_for(lambda: len(self.answers) >= self.sent, timeout_s)

    def msg_id(self, rid: int) -> str | None:
        ok = self.answers.get(rid, {}).get("ok")
        return None if ok is None else str(ok["msgId"])

    def close(self) -> None:
        self.sock.close()


def _sender(run: _Run) -> Any:
    """``(send(to, kind) -> ticket, resolve(ticket) -> msg_id | None, settle(), close())``."""
    if run.sender == "socket":
        client = _Pipelined(run.socket("A"))
        return client.send, client.msg_id, client.settle, client.close
    if run.sender == "socket-sync":  # one send at a time, each waiting for its commit
        from pipeline.host.socket_client import SocketClient

        sync = SocketClient.connect(run.socket("A"))

        def send_sync(to: str, kind: str) -> str:
            return sync.send(sender="main-a", to=to, body=b"bench", kind=kind).msg_id

        return send_sync, lambda ticket: ticket, lambda: None, sync.close
    from pipeline.bootstrap.client import build_client
    from pipeline.envelope import Kind
    from pipeline.host.config import load_config

    direct = build_client(load_config(run.config("A")), signer=run.signers["A"])

    def send_direct(to: str, kind: str) -> str:
        return direct.send(sender="main-a", to=to, body=b"bench", kind=Kind(kind)).msg_id

    return send_direct, lambda ticket: ticket, lambda: None, lambda: None


def _wait_for(
    arrivals: _Arrivals, replies: dict[str, float], briefs: dict[str, float], timeout_s: float
) -> tuple[dict[str, int], dict[str, int]]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            held, receipts = arrivals.held(), arrivals.receipts()
        except Exception:  # a busy store: look again, within the deadline
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)
            continue
        done = all(m in held for m in replies) and all(m in receipts for m in briefs)
        if done or time.monotonic() > deadline:
            return held, receipts
        time.sleep(0.25)


def ready(run: _Run, bootstrap: str, start_timeout_s: float) -> float:
    """Start the gateways and wait until each knows the other's entities and both inbox groups
    are STABLE; the seconds it took."""
    run.start()
    from pipeline.bootstrap.client import build_client
    from pipeline.host.config import load_config
    from pipeline.kafka.topics import TopicNames
    from pipeline.support.waiting import wait_until

    t_start = time.monotonic()
    deadline = t_start + start_timeout_s

    # the stores exist once each gateway built its graph
    def stores_exist() -> bool:
        run.check_alive()
        return all(
            os.path.exists(u.removeprefix("sqlite:///"))
            for u in run.urls.values()
            if u.startswith("sqlite:///")
        )

    wait_until(stores_exist, timeout_s=deadline - time.monotonic(), what="the gateways' stores")
    time.sleep(1.0)
    # both ways: A must know B's entities, and B must know main-a (else B refuses the
    # first messages as UNKNOWN_SENDER and dead-letters them)
    watch_a = build_client(load_config(run.config("A")), signer=run.signers["A"])
    watch_b = build_client(load_config(run.config("B")), signer=run.signers["B"])

    def both_ways() -> bool:
        run.check_alive()
        return watch_a.knows("worker-b") and watch_a.knows("main-b") and watch_b.knows("main-a")

    wait_until(
        both_ways,
        timeout_s=deadline - time.monotonic(),
        what="hosts A and B to see each other's entities",
    )
    topics = TopicNames(prefix=run.prefix)
    _groups_stable(bootstrap, [topics.gateway_group(h) for h in GATEWAYS], deadline, run)
    return round(time.monotonic() - t_start, 1)


def warm_up(sender: Any, arrivals: _Arrivals) -> None:
    """One message of each kind all the way through before any timing."""
    send, resolve, settle, _close = sender
    tickets = send("main-b", "REPLY"), send("worker-b", "SEND")
    settle()
    warm_r, warm_b = {resolve(tickets[0]): 0.0}, {resolve(tickets[1]): 0.0}
    held, receipts = _wait_for(arrivals, warm_r, warm_b, 120.0)
    if not (set(warm_r) <= set(held) and set(warm_b) <= set(receipts)):
        raise TimeoutError("the warm-up messages never arrived")


# a phase of a run: (its key in the result, offered msg/s, mix: "both" | "reply" | "brief")
Phase = tuple[str, int, str]


def run_once(
    bootstrap: str,
    *,
    sender: str = "socket",
    rates: tuple[int, ...] = (500,),
    seconds: float = 10.0,
    store_urls: dict[str, str] | None = None,
    start_timeout_s: float = 180.0,
    floor: bool = True,
    briefs_too: bool = True,
    briefs_only: bool = False,
    phases: tuple[Phase, ...] | None = None,
    until: Callable[[dict[str, Any]], bool] | None = None,
    server_pid: int | None = None,
    idle_s: float = 0.0,
    injector: str = "one-shot",
) -> dict[str, Any]:
    """One run; never raises for a slow or failed start: the result says what happened.

    With ``floor``, :mod:`bench.kafka_floor` first runs the bare Kafka hops at each rate, before
    any gateway starts (so the floor is the hop at its quietest). Without
    ``briefs_too`` every send is a REPLY (the sender's own rate, no injects beside it); with
    ``briefs_only`` every send is a brief (the brief path's own cost, no REPLYs beside it).
    ``injector`` is worker-b's command mode (``one-shot``: ``true`` per brief; ``long-lived``).
    ``phases`` replaces ``rates`` (one ``at_<rate>`` phase each) with named phases of their own
    mix; ``until(phase_result)`` true ends the run after that phase (the knee's steps).
    ``server_pid`` (the PostgreSQL postmaster) is counted as a tree beside the gateways. With
    ``idle_s``, the processes' CPU at rest after the warm-up, before any phase (``idle``)."""
    if phases is None:
        mix = "brief" if briefs_only else "both" if briefs_too else "reply"
        phases = tuple((f"at_{r}", r, mix) for r in rates)
    run = _Run(bootstrap, sender=sender, store_urls=store_urls, injector=injector)
    result: dict[str, Any] = {"sender": sender, "store": run.urls["A"].split(":", 1)[0]}
    result["injector"] = injector
    arrivals: _Arrivals | None = None
    ok = False
    try:
        if floor:  # first, with nothing of ours running: the bare hops at its lowest
            from . import kafka_floor

            for rate in sorted({r for _, r, _ in phases}):
                result[f"floor_at_{rate}"] = kafka_floor.measure(
                    bootstrap, rate=rate, seconds=seconds
                )
        result["start_s"] = ready(run, bootstrap, start_timeout_s)
        arrivals = _Arrivals(run.urls)
        client = _sender(run)
        # each gateway counted with its children (a long-lived injector child is its cost,
        # as the reaped one-shot ones are); the PostgreSQL server with its backends
        pids = {k: v for k, v in run.pids().items() if not k.startswith("gateway_")}
        trees = {k: v for k, v in run.pids().items() if k.startswith("gateway_")}
        if server_pid is not None:
            trees["postgresql"] = server_pid
        try:
            warm_up(client, arrivals)
            if idle_s > 0:
                window = CpuWindow(pids, trees).start()
                time.sleep(idle_s)
                result["idle"] = window.stop()
            for key, rate, mix in phases:
                result[key] = _phase(
                    client, arrivals, rate, seconds, mix=mix, pids=pids, trees=trees
                )
                if until is not None and until(result[key]):
                    break
        finally:
            client[3]()  # close
        ok = True
    except Exception as exc:  # noqa: BLE001 - keep the figures already measured, say why
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["logs"] = run.log_tails()
        result["run_dir"] = str(run.root)
    finally:
        if arrivals is not None:
            arrivals.close()
        run.stop()
        if ok:
            shutil.rmtree(run.root, ignore_errors=True)
    return result


def _phase(
    sender: Any,
    arrivals: _Arrivals,
    rate: int,
    seconds: float,
    *,
    mix: str = "both",
    pids: dict[str, int] | None = None,
    trees: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Offer ``rate`` for ``seconds``; the CPU window runs until every message arrived (or the
    wait ended), so the drain of a backlog is counted where it was paid. ``mix``: every other
    send a brief (``both``), every send a REPLY (``reply``) or every send a brief (``brief``)."""
    send, resolve, settle, _close = sender
    cpu = CpuWindow(pids or {}, trees).start()
    total = int(rate * seconds)
    calls: list[tuple[Any, float, bool]] = []  # (ticket, called at, is a reply)
    errors = 0
    t0 = time.perf_counter()
    sent = 0
    for i in range(total):
        if time.perf_counter() - t0 > 2 * seconds:
            break  # a sender slower than offered: stop at twice the phase, report what it reached
        sent += 1
        target = t0 + i / rate
        while (now := time.perf_counter()) < target:
            time.sleep(min(0.0005, target - now))
        called_ms = time.time() * 1000
        reply = mix == "reply" or (mix == "both" and i % 2 == 0)
        try:
            if reply:
                calls.append((send("main-b", "REPLY"), called_ms, True))
            else:
                calls.append((send("worker-b", "SEND"), called_ms, False))
        except Exception:  # noqa: BLE001 - counted, the run goes on
            errors += 1
    elapsed = time.perf_counter() - t0
    settle()
    settled = time.perf_counter() - t0  # every send answered: committed in A's store
    replies: dict[str, float] = {}
    briefs: dict[str, float] = {}
    for ticket, called_ms, reply in calls:
        msg_id = resolve(ticket)
        if msg_id is None:
            errors += 1
        else:
            (replies if reply else briefs)[msg_id] = called_ms
    held, receipts = _wait_for(arrivals, replies, briefs, 60.0)
    used = cpu.stop()
    to_held, to_injected = Histogram(), Histogram()
    for m, t in replies.items():
        if m in held:
            to_held.record_ms(held[m] - t)
    for m, t in briefs.items():
        if m in receipts:
            to_injected.record_ms(receipts[m] - t)
    messages = len(replies) + len(briefs)
    return {
        "offered_msg_per_s": rate,
        "mix": mix,
        "achieved_msg_per_s": round(sent / elapsed),
        # what the gateway committed: sends answered per second, the last answer included
        "committed_msg_per_s": round(messages / settled),
        "send_errors": errors,
        "send_to_held_ms": {**to_held.summary_ms(), "of": len(replies)},
        "send_to_injected_ms": {**to_injected.summary_ms(), "of": len(briefs)},
        "cpu": used,
        # CPU of each process over the window (drain included) per message committed
        "cpu_us_per_msg": {
            k.removesuffix("_cpu_s"): us_per_message(v, messages)
            for k, v in used.items()
            if k.endswith("_cpu_s") and not k.endswith("_threads_cpu_s")
        },
        # the same per thread role of each gateway (which loop spent it)
        "cpu_us_per_msg_by_thread": {
            k.removesuffix("_threads_cpu_s"): {r: us_per_message(v, messages) for r, v in d.items()}
            for k, d in used.items()
            if k.endswith("_threads_cpu_s")
        },
    }


def pg_urls(base_url: str) -> dict[str, str]:
    """Two fresh databases (one per host) on the PostgreSQL server at ``base_url``."""
    import psycopg

    names = {h: f"lat_{h.lower()}_{uuid.uuid4().hex[:8]}" for h in GATEWAYS}
    plain = base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        for name in names.values():
            conn.execute(f"CREATE DATABASE {name}")
    root, _, _db = base_url.rpartition("/")
    return {h: f"{root}/{name}" for h, name in names.items()}


class Stores:
    """Fresh stores for each run: SQLite files in the run's own folder, or two new databases on
    one PostgreSQL server started on first use (its postmaster's pid, for the CPU window)."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.pg: Any = None

    def next(self) -> tuple[dict[str, str] | None, int | None]:
        """``(store_urls or None for SQLite, the PostgreSQL server's pid or None)``."""
        if self.store != "postgresql":
            return None, None
        if self.pg is None:
            from pipeline.testing import start_test_postgres

            self.pg = start_test_postgres()
        return pg_urls(self.pg.url), postmaster_pid(self.pg.directory)

    def close(self) -> None:
        if self.pg is not None:
            self.pg.close()
            self.pg = None


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _not_arrived(phase: dict[str, Any]) -> int:
    return sum(
        phase[k]["of"] - phase[k].get("n", 0) for k in ("send_to_held_ms", "send_to_injected_ms")
    )


def repeats(
    bootstrap: str,
    *,
    sender: str,
    store: str,
    n: int,
    seconds: float,
    rates: tuple[int, ...],
    floor: bool = True,
    briefs_too: bool = True,
    briefs_only: bool = False,
    injector: str = "one-shot",
) -> dict[str, Any]:
    """``n`` runs and, per rate, min / median / max of the p99s and of the achieved rate."""
    runs = []
    stores = Stores(store)
    try:
        for _ in range(n):
            urls, server = stores.next()
            runs.append(
                run_once(
                    bootstrap,
                    sender=sender,
                    rates=rates,
                    seconds=seconds,
                    store_urls=urls,
                    floor=floor,
                    briefs_too=briefs_too,
                    briefs_only=briefs_only,
                    server_pid=server,
                    injector=injector,
                )
            )
    finally:
        stores.close()
    table: dict[str, Any] = {}
    for rate in rates:
        got = [r[f"at_{rate}"] for r in runs if f"at_{rate}" in r]
        if not got:
            continue
        table[f"at_{rate}"] = {
            "runs": len(got),
            "send_to_held_p99_ms": spread(
                [g["send_to_held_ms"].get("p99", float("nan")) for g in got]
            ),
            "send_to_injected_p99_ms": spread(
                [g["send_to_injected_ms"].get("p99", float("nan")) for g in got]
            ),
            "achieved_msg_per_s": spread([g["achieved_msg_per_s"] for g in got]),
            "committed_msg_per_s": spread([g["committed_msg_per_s"] for g in got]),
            # sent but not held / receipted within the wait: a p99 over the rest hides nothing
            "not_arrived": spread([_not_arrived(g) for g in got]),
        }
        busy = [g["cpu"]["machine_busy"] for g in got if "machine_busy" in g.get("cpu", {})]
        if busy:  # how saturated the machine was while the phase ran and drained
            table[f"at_{rate}"]["machine_busy"] = spread(busy)
            for name in ("gateway_A", "gateway_B", "postgresql", "broker", "bench"):
                cores = [g["cpu"][f"{name}_cores"] for g in got if f"{name}_cores" in g["cpu"]]
                if cores:
                    table[f"at_{rate}"][f"{name}_cores"] = spread(cores)
        floors = [(r[f"at_{rate}"], r[f"floor_at_{rate}"]) for r in runs if f"floor_at_{rate}" in r]
        if floors:
            hop = [f["one_hop_ms"]["p99"] for _, f in floors]
            trip = [f["round_trip_ms"]["p99"] for _, f in floors]
            table[f"at_{rate}"].update(
                {
                    "floor_one_hop_p99_ms": spread(hop),
                    "floor_round_trip_p99_ms": spread(trip),
                    # within one run: how many times the bare hop(s) our path's p99 is
                    "held_p99_over_one_hop_p99": spread(
                        [
                            round(g["send_to_held_ms"].get("p99", float("nan")) / h, 2)
                            for (g, _), h in zip(floors, hop, strict=True)
                        ]
                    ),
                    "injected_p99_over_round_trip_p99": spread(
                        [
                            round(g["send_to_injected_ms"].get("p99", float("nan")) / t, 2)
                            for (g, _), t in zip(floors, trip, strict=True)
                        ]
                    ),
                }
            )
    return {"sender": sender, "store": store, "summary": table, "runs": runs}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m bench.latency")
    ap.add_argument("--direct", action="store_true", help="the sender writes A's store itself")
    ap.add_argument("--sync", action="store_true", help="through the socket, one send at a time")
    ap.add_argument("--postgresql", action="store_true", help="PostgreSQL stores (else SQLite)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rates", default="500", help="comma-separated offered rates")
    ap.add_argument("--no-floor", action="store_true", help="skip the bare Kafka hops")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--replies-only", action="store_true", help="every send a REPLY, no briefs")
    only.add_argument("--briefs-only", action="store_true", help="every send a brief, no REPLYs")
    ap.add_argument(
        "--injector",
        choices=("one-shot", "long-lived"),
        default="one-shot",
        help="worker-b's command injector: `true` per brief (default), or one long-lived child",
    )
    args = ap.parse_args(argv)
    with kafka("bench-lat") as bootstrap:
        out = repeats(
            bootstrap,
            sender="direct" if args.direct else "socket-sync" if args.sync else "socket",
            store="postgresql" if args.postgresql else "sqlite",
            n=args.repeats,
            seconds=args.seconds,
            rates=tuple(int(r) for r in args.rates.split(",")),
            floor=not args.no_floor,
            briefs_too=not args.replies_only,
            briefs_only=args.briefs_only,
            injector=args.injector,
        )
    print(json.dumps(out, indent=2), flush=True)
    return out


if __name__ == "__main__":
    main()
