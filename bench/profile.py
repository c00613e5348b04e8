"""Where a gateway's CPU goes at 500 msg/s: py-spy on both gateways, one command.

``python -m bench profile [--postgresql] [--mix both|reply|brief] [--rate R] [--seconds S]``
starts two gateways as :mod:`bench.latency` does, offers ``rate`` msg/s of the chosen mix (the
latency rows' half-and-half by default), and, once the phase runs, records each gateway with
``py-spy record --gil`` twice, one after the other (one tracer per process at a time): collapsed
stacks (``--format raw``) and an SVG flame graph (``--format flamegraph``). It writes
``profile-<store>-<A|B>.txt`` / ``.svg`` under ``--out`` (default ``bench/results/profile/``)
and prints, per gateway, the share of samples by the package the sampled frame is in and the top
inclusive frames of ``pipeline/`` (the share of samples with that frame anywhere on the stack).
The CPU per message of the phase is printed beside, so a flame graph is read with its cost.

``--gil`` samples only the thread holding the GIL: the Python work that serialises the
gateway. Time in C with the GIL released (librdkafka, the Ed25519 calls, SQLite I/O) is left
out: read it from the CPU figures, not from the graph. Both are printed: the phase's CPU per
message per gateway and per thread role (bench/cpu.py), and with ``--perf`` (Linux ``perf``
installed) each gateway's on-CPU samples by thread and shared object -- the interpreter
(``libpython``), the crypto (``_rust.abi3.so``), SQLite, librdkafka, the kernel -- which says
how much of a thread's CPU is Python at all.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from . import latency
from .broker import kafka

# the dev extra installs it beside this interpreter; PY_SPY names another
PY_SPY = os.environ.get("PY_SPY") or str(Path(sys.executable).with_name("py-spy"))
WARM_S = 3.0  # the phase runs this long before the first sample


def package(frame: str) -> str:
    """Which package a collapsed-stack frame ``func (path:line)`` is in, for the self shares."""
    for name in ("sqlalchemy", "confluent_kafka", "cryptography", "psycopg"):
        if name in frame:
            return name
    return "pipeline" if "pipeline/" in frame else "other"


def inclusive(lines: list[str], pattern: str = "pipeline/", top: int = 40) -> dict[str, Any]:
    """From collapsed stacks (``f1;f2;f3 N`` a line): total samples, the self share by package
    of the innermost frame, and the ``top`` frames matching ``pattern`` by inclusive share (a
    frame counted once per stack however often it recurs in it)."""
    incl: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for raw in lines:
        line = raw.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        total += n
        for f in set(frames):
            if pattern in f:
                incl[f] += n
        own[package(frames[-1])] += n
    share = (lambda n: round(100 * n / total, 1)) if total else (lambda n: 0.0)
    return {
        "samples": total,
        "self_by_package_pct": {k: share(v) for k, v in own.most_common()},
        "inclusive_pct": [(share(n), f) for f, n in incl.most_common(top)],
    }


def _record(pid: int, seconds: float, fmt: str, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            PY_SPY,
            "record",
            "-p",
            str(pid),
            "-d",
            str(int(seconds)),
            "-r",
            "200",
            "--gil",
            "--format",
            fmt,
            "-o",
            str(path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _sample(pids: dict[str, int], seconds: float, out: Path, tag: str) -> dict[str, str]:
    """Raw then flame graph, both gateways at once each time; py-spy's complaints by gateway."""
    errors: dict[str, str] = {}
    for fmt, ext in (("raw", "txt"), ("flamegraph", "svg")):
        procs = {h: _record(pid, seconds, fmt, out / f"{tag}-{h}.{ext}") for h, pid in pids.items()}
        for h, p in procs.items():
            _, err = p.communicate(timeout=seconds + 120)
            if p.returncode:
                errors[f"{h}.{ext}"] = err.decode(errors="replace")[-500:]
    return errors


def perf_by_object(report: str, top: int = 25) -> list[tuple[float, str, str]]:
    """``perf report --sort comm,dso --stdio -g none`` lines: (share %, thread, shared object)."""
    rows = []
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and not line.lstrip().startswith("#"):
            try:
                rows.append((float(parts[0].rstrip("%")), parts[1], " ".join(parts[2:])))
            except ValueError:
                continue
    return sorted(rows, reverse=True)[:top]


def _perf(pids: dict[str, int], seconds: float, out: Path, tag: str) -> dict[str, Any]:
    """``perf record`` both gateways at once, then each one's samples by thread and object."""
    procs = {
        h: subprocess.Popen(
            ["perf", "record", "-F", "499", "-p", str(pid), "-o", str(out / f"{tag}-{h}.perf"),
             "--", "sleep", str(seconds)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for h, pid in pids.items()
    }  # fmt: skip
    result: dict[str, Any] = {}
    for h, p in procs.items():
        _, err = p.communicate(timeout=seconds + 60)
        report = subprocess.run(
            ["perf", "report", "-i", str(out / f"{tag}-{h}.perf"), "--no-children",
             "--sort", "comm,dso", "--stdio", "-g", "none"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        result[h] = perf_by_object(report.stdout) or err.decode(errors="replace")[-300:]
    return result


def profile(
    bootstrap: str,
    *,
    store: str,
    mix: str,
    rate: int,
    seconds: float,
    out: Path,
    top: int,
    perf: bool = False,
    injector: str = "long-lived",
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    tag = f"profile-{store}"
    stores = latency.Stores(store)
    urls, server = stores.next()
    run = latency._Run(bootstrap, sender="socket", store_urls=urls, injector=injector)
    arrivals = None
    result: dict[str, Any] = {"store": store, "mix": mix, "rate": rate, "out": str(out)}
    try:
        result["start_s"] = latency.ready(run, bootstrap, 180.0)
        arrivals = latency._Arrivals(run.urls)
        sender = latency._sender(run)
        latency.warm_up(sender, arrivals)
        phase: dict[str, Any] = {}
        # the gateways as trees: their children and their threads' roles (bench/cpu.py)
        trees = {k: v for k, v in run.pids().items() if k.startswith("gateway_")}
        pids = {k: v for k, v in run.pids().items() if not k.startswith("gateway_")}
        if server is not None:
            trees["postgresql"] = server
        offered_s = WARM_S + (3 if perf else 2) * seconds + 2
        runner = threading.Thread(
            target=lambda: phase.update(
                latency._phase(sender, arrivals, rate, offered_s, mix=mix, pids=pids, trees=trees)
            )
        )
        runner.start()
        time.sleep(WARM_S)
        gateways = {h: p.pid for h, p in run.procs.items()}
        result["py_spy_errors"] = _sample(gateways, seconds, out, tag)
        if perf:
            result["perf_by_thread_and_object_pct"] = _perf(gateways, seconds, out, tag)
        runner.join()
        sender[3]()
        result["cpu_us_per_msg"] = phase.get("cpu_us_per_msg")
        result["cpu_us_per_msg_by_thread"] = phase.get("cpu_us_per_msg_by_thread")
        result["send_to_held_ms"] = phase.get("send_to_held_ms")
        result["send_to_injected_ms"] = phase.get("send_to_injected_ms")
        for h in gateways:
            raw = out / f"{tag}-{h}.txt"
            if raw.exists():
                result[f"gateway_{h}"] = inclusive(raw.read_text().splitlines(), top=top)
    finally:
        if arrivals is not None:
            arrivals.close()
        run.stop()
        stores.close()
    return result


def _print(result: dict[str, Any]) -> None:
    skip = ("gateway_", "perf_")
    print(json.dumps({k: v for k, v in result.items() if not k.startswith(skip)}, indent=2))
    for h, rows in (result.get("perf_by_thread_and_object_pct") or {}).items():
        print(f"\n== gateway {h}: perf, on-CPU samples by thread and object")
        for pct, thread, obj in rows if isinstance(rows, list) else ():
            print(f"{pct:5.1f}% {thread:16} {obj}")
    for h in latency.GATEWAYS:
        got = result.get(f"gateway_{h}")
        if not got:
            continue
        print(f"\n== gateway {h}: {got['samples']} samples (GIL held), self share by package "
              f"{got['self_by_package_pct']}")  # fmt: skip
        for pct, frame in got["inclusive_pct"]:
            print(f"{pct:5.1f}% {frame[:150]}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench profile")
    ap.add_argument("--postgresql", action="store_true", help="PostgreSQL stores (else SQLite)")
    ap.add_argument("--mix", choices=("both", "reply", "brief"), default="both")
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=15.0, help="each py-spy recording")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--perf", action="store_true", help="also perf: samples by thread and object")
    ap.add_argument(
        "--injector",
        choices=("long-lived", "one-shot"),
        default="long-lived",
        help="worker-b's command injector (long-lived: as bench hotpath)",
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "profile")
    args = ap.parse_args(argv)
    with kafka("bench-profile") as bootstrap:
        result = profile(
            bootstrap,
            store="postgresql" if args.postgresql else "sqlite",
            mix=args.mix,
            rate=args.rate,
            seconds=args.seconds,
            out=args.out,
            top=args.top,
            perf=args.perf,
            injector=args.injector,
        )
    _print(result)
    (args.out / f"profile-{result['store']}.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
