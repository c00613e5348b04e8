"""Wall time of one ``fleet`` process, as a ratio over ``python -c pass`` measured in the same run.

Agents call ``fleet send`` from their shells, so a process's start-up is paid per message (issue
17: 0.67-0.74 s before subcommands loaded on use). Three commands, each run ``repeats`` times
interleaved with the baseline: ``fleet --help``, ``fleet send --help``, and a real
``fleet send`` (a SQLite store already at head, the recipient in the roster cache; the message
waits in the outbox, so no broker is needed), and that send again through a gateway's local
socket (the production socket server, in this process, over the same store). Absolute seconds
on this shared machine are noisy: the ratios travel. Run: ``python -m bench cli`` (three repeats; ``--quick`` changes nothing).
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.envelope import Signer
from pipeline.host import roster_cache
from pipeline.store import make_engine, session_factory

FAR_MS = 10**15


def _fleet() -> list[str]:
    """The installed ``fleet`` script when it runs the lean entry (``pipeline.cli.entry``), else
    ``python -m pipeline`` (the same entry; a script installed before the entry moved would run
    the Typer app directly)."""
    script = Path(sys.executable).with_name("fleet")
    if script.exists() and "pipeline.cli.entry" in script.read_text(errors="replace"):
        return [str(script)]
    return [sys.executable, "-m", "pipeline"]


def _load() -> str:
    """The 1/5/15-minute load averages (what ``uptime`` prints): the machine's queue for a core."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _host(root: Path, socket: str = "") -> Path:
    """A host A config whose store is at head and knows main-b (as a gateway would have left it);
    ``socket``: where its gateway serves local sends ("": none, the send writes the store)."""
    if not (root / "A.key").exists():
        Signer.generate("A").write_private(root / "A.key")
    store = f"sqlite:///{root / 'A.sqlite'}"
    config = root / ("fleet-socket.toml" if socket else "fleet.toml")
    config.write_text(
        f'host = "A"\nstore_url = "{store}"\nkey_file = "{root / "A.key"}"\n'
        + (f'socket_path = "{socket}"\n' if socket else "")
        + '[[entities]]\ngid = "main-a"\nrole = "main"\ndelivery = "pull"\n'
    )
    engine = make_engine(store)
    with session_factory(engine).begin() as s:
        entry = roster_cache.RosterEntry("main-b", "B", "main", "pull", (), FAR_MS)
        roster_cache.replace_all(s, [entry])
    engine.dispose()
    return config


def _serve(root: Path, config: Path) -> Any:
    """The gateway's socket server (the production class, over the production client) on A."""
    from pipeline.bootstrap.client import build_client
    from pipeline.gateway.socket_server import SocketServer
    from pipeline.host.config import load_config

    cfg = load_config(config)
    client = build_client(cfg, signer=Signer.load(root / "A.key"))
    assert cfg.local_socket is not None
    return SocketServer(path=cfg.local_socket, client=client).start()


def _wall(argv: list[str], cpu: list[float] | None = None) -> float:
    """Wall seconds of one run; its CPU seconds (user + system, the child's) go to ``cpu``: on a
    loaded machine wall time mostly measures the queue for a core, CPU time the work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, timeout=300)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def _spread(xs: list[float]) -> dict[str, float]:
    return {"min": round(min(xs), 3), "median": round(statistics.median(xs), 3),
            "max": round(max(xs), 3)}  # fmt: skip


def _summary(times: list[float], base: float, cpu: list[float]) -> dict[str, Any]:
    return {
        "s": _spread(times),
        "cpu_s": _spread(cpu),
        "ratio_over_python": round(statistics.median(times) / base, 1),
    }


def main(quick: bool = False) -> dict[str, Any]:
    repeats = 3
    fleet = _fleet()
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-cli-") as d:
        config = _host(Path(d))
        try:
            via_socket = _host(Path(d), socket=str(Path(d) / "A.sock"))
            server = _serve(Path(d), via_socket)
        except Exception:  # noqa: BLE001 - code without the socket (a "before" run)
            via_socket, server = None, None
        send = ["send", "--from", "main-a", "--to", "main-b", "bench"]
        # through the socket `fleet send` takes the lean entry (no Typer, Rich or SQLAlchemy);
        # with no gateway it is the Typer command writing the store
        runs = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "fleet --help": [*fleet, "--help"],
            "fleet send --help": [*fleet, "send", "--help"],
            "fleet send": [*fleet, *send, "-c", str(config)],
        }
        if server is not None:
            runs["fleet send (gateway socket)"] = [*fleet, *send, "-c", str(via_socket)]
        try:
            for warm in ("fleet send", "fleet send (gateway socket)"):  # page cache, store
                if warm in runs:
                    _wall(runs[warm])
            times: dict[str, list[float]] = {name: [] for name in runs}
            cpu: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(repeats):
                for name, argv in runs.items():
                    times[name].append(_wall(argv, cpu[name]))
        finally:
            if server is not None:
                server.close()
    base = statistics.median(times["python -c pass"])
    return {
        "repeats": repeats,
        "load_before_after": [load_before, _load()],
        "command": " ".join(fleet),
        "baseline_python_s": _summary(times["python -c pass"], base, cpu["python -c pass"]),
        **{
            name: _summary(t, base, cpu[name])
            for name, t in times.items()
            if name != "python -c pass"
        },
    }
