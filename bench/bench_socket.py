"""The gateway's CPU per send through its local socket: ``python -m bench socket [--quick]``.

A real :class:`~pipeline.gateway.socket_server.SocketServer` on a SQLite store (in this process)
serves a client in a child process at a paced rate, half REPLYs to a pull main, half SENDs to an
inject worker (a tracking row each), as ``bench.latency``'s sender does. Two clients:

* ``pipelined``: one connection, requests written as they are due, answers read by a second
  thread (the latency bench's sender; 500 sends/s);
* ``per_call``: one connection per send, as ``fleet send`` and the MCP server connect
  (200 sends/s).

* ``one_at_a_time``: one connection, each REPLY sent after the answer to the last, so every
  send is a group of its own, at three paces: back to back (the next send as soon as the answer
  came), 500 and 100 sends/s. The same code and the same work per send at every pace; what
  grows with the pause between sends is what this machine charges a thread for waking up again
  (docs/performance.md, "The machine's page tax"). ``at_500_over_back_to_back`` and
  ``at_100_over_back_to_back`` are each pace's CPU per send over the back-to-back one's, same
  round.

The figure is this process's CPU (``getrusage``: user + system, every thread) per send: the
socket server, the group commit (envelope, signature, outbox and tracking rows, COMMIT) and the
answer. The client's CPU is its own process's and not counted. Three rounds: min / median / max.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .latency import spread

_PIPELINED = r"""
import json, socket, struct, sys, threading, time
path, rate, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.connect(path)
def answers():
    f = s.makefile("rb")
    for _ in range(n):
        head = f.read(4); a = json.loads(f.read(struct.unpack(">I", head)[0]))
        assert "ok" in a, a
t = threading.Thread(target=answers); t.start()
start = time.monotonic()
for i in range(n):
    wait = start + i / rate - time.monotonic()
    if wait > 0: time.sleep(wait)
    body = json.dumps({"id": i, "op": "send", "sender": "main-a",
                       "to": "main-b" if i % 2 else "worker-b", "body": "YmVuY2g=",
                       "kind": "REPLY" if i % 2 else "SEND"}).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
t.join()
"""

_PER_CALL = r"""
import json, socket, struct, sys, time
path, rate, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = time.monotonic()
for i in range(n):
    wait = start + i / rate - time.monotonic()
    if wait > 0: time.sleep(wait)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        body = json.dumps({"id": i, "op": "send", "sender": "main-a",
                           "to": "main-b" if i % 2 else "worker-b", "body": "YmVuY2g=",
                           "kind": "REPLY" if i % 2 else "SEND"}).encode()
        s.sendall(struct.pack(">I", len(body)) + body)
        with s.makefile("rb") as f:
            head = f.read(4); a = json.loads(f.read(struct.unpack(">I", head)[0]))
        assert "ok" in a, a
"""


_ONE_AT_A_TIME = r"""
import json, socket, struct, sys, time
path, rate, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX); s.connect(path); f = s.makefile("rb")
start = time.monotonic()
for i in range(n):
    if rate:
        wait = start + i / rate - time.monotonic()
        if wait > 0: time.sleep(wait)
    body = json.dumps({"id": i, "op": "send", "sender": "main-a", "to": "main-b",
                       "body": "YmVuY2g=", "kind": "REPLY"}).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
    head = f.read(4); a = json.loads(f.read(struct.unpack(">I", head)[0]))
    assert "ok" in a, a
"""
PACES = (0, 500, 100)  # sends/s of the one-at-a-time client; 0: back to back
SLOW_SHARE = 5  # at 100 sends/s a round sends a fifth as many (the same seconds as at 500)


def _cpu_per_send(child: str, path: str, rate: int, n: int) -> float:
    before = resource.getrusage(resource.RUSAGE_SELF)
    subprocess.run([sys.executable, "-c", child, path, str(rate), str(n)], check=True)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / n * 1e6


def main(quick: bool = False) -> dict[str, Any]:
    from pipeline.gateway.socket_server import SocketServer
    from pipeline.host import roster_cache
    from pipeline.store import serialize_writes, session_factory
    from pipeline.testing import one_host

    n = 1000 if quick else 3000
    folder = Path(tempfile.mkdtemp(prefix="bench-socket-"))
    host = one_host(folder)
    serialize_writes(host.engine)
    far = 10**15
    with session_factory(host.engine).begin() as s:
        roster_cache.replace_all(s, [
            roster_cache.RosterEntry("main-b", "B", "main", "pull", (), far),
            roster_cache.RosterEntry("worker-b", "B", "worker", "inject", (), far),
        ])  # fmt: skip
    path = str(folder / "s.sock")
    server = SocketServer(path=path, client=host.client).start()
    result: dict[str, Any] = {"sends_per_round": n}
    try:
        for name, child, rate in (("pipelined", _PIPELINED, 500), ("per_call", _PER_CALL, 200)):
            _cpu_per_send(child, path, rate, min(n, 300))  # warm up
            rounds = sorted(_cpu_per_send(child, path, rate, n) for _ in range(3))
            result[name] = {"rate_per_s": rate, "server_cpu_us_per_send": spread(rounds)}
        result["one_at_a_time"] = _one_at_a_time(path, min(n, 2000))
    finally:
        server.close()
        host.engine.dispose()
    return result


def _one_at_a_time(path: str, n: int) -> dict[str, Any]:
    """Each pace's CPU per send, and each paced one over the back-to-back one of its round (the
    paces alternate within a round, so the machine's drift hits them alike)."""
    _cpu_per_send(_ONE_AT_A_TIME, path, 0, min(n, 300))  # warm up
    per_pace: dict[int, list[float]] = {pace: [] for pace in PACES}
    for _ in range(3):
        for pace in PACES:
            per_pace[pace].append(
                _cpu_per_send(_ONE_AT_A_TIME, path, pace, n // SLOW_SHARE if pace == 100 else n)
            )
    out: dict[str, Any] = {
        f"{'back_to_back' if pace == 0 else f'at_{pace}'}_cpu_us_per_send": spread(v)
        for pace, v in per_pace.items()
    }
    for pace in PACES[1:]:
        ratios = [p / b for p, b in zip(per_pace[pace], per_pace[0], strict=True)]
        out[f"at_{pace}_over_back_to_back"] = spread(ratios)
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(main("--quick" in sys.argv), indent=2))
