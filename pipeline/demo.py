"""The README's run command: a local broker, two gateways (hosts A and B), one conversation.

A main on host A sends a brief to a worker on host B. B's gateway commits, then injects it (a
callback injector standing in for a real agent pane) and publishes ``INJECTED``; the worker
replies. Both come back to A and are drained by the main. Every step is printed as it happens.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from pipeline.envelope import Signer, TrustStore
from pipeline.gateway.config import (
    Delivery,
    EntityConfig,
    GatewayConfig,
    InjectorSpec,
    Role,
)


def _say(console: Console, t0: float, who: str, text: str) -> None:
    console.print(f"[dim]{time.monotonic() - t0:7.3f}s[/] [bold]{who:<10}[/] {text}")


def run_demo(
    *,
    bootstrap: str | None = None,
    workdir: Path | None = None,
    console: Console | None = None,
    briefs: int = 3,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Run the demo; returns what was observed (the tests assert on it)."""
    from pipeline.bootstrap import build_gateway
    from pipeline.kafka.local import LauncherConfig, LocalCluster, default_cluster_dir

    console = console or Console()
    t0 = time.monotonic()
    cluster: LocalCluster | None = None
    if bootstrap is None:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if bootstrap is None:
        _say(console, t0, "kafka", "starting a local KRaft broker (Maven Central jars)...")
        cluster = LocalCluster(
            LauncherConfig(directory=default_cluster_dir().parent / "demo-kafka"), owned=True
        ).start()
        bootstrap = cluster.bootstrap_servers
        _say(console, t0, "kafka", f"Kafka {cluster.version()} ready at {bootstrap}")
    tmp = Path(workdir or tempfile.mkdtemp(prefix="fleet-demo-"))
    prefix = f"demo{int(time.time())}."
    signers = {h: Signer.generate(h) for h in ("A", "B")}
    trust = TrustStore()
    for s in signers.values():
        trust.add(s.host, s.key_id, s.public_key_bytes)

    injected: list[str] = []
    worker_inbox: list[tuple[str, bytes]] = []
    done = threading.Event()

    def worker_b(*, gid: str, msg_id: str, kind: str, sender: str, body: bytes) -> None:
        worker_inbox.append((msg_id, body))
        injected.append(msg_id)
        _say(console, t0, "worker-b", f"injected {kind} {msg_id[:8]}: {body.decode()!r}")

    cfg_a = GatewayConfig(
        host="A", bootstrap=bootstrap, store_url=f"sqlite:///{tmp / 'A.sqlite'}",
        topic_prefix=prefix, inject_deadline_s=20,
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
    )
    cfg_b = GatewayConfig(
        host="B", bootstrap=bootstrap, store_url=f"sqlite:///{tmp / 'B.sqlite'}",
        topic_prefix=prefix, inject_deadline_s=20,
        entities=(
            EntityConfig(
                gid="worker-b", role=Role.WORKER, delivery=Delivery.INJECT,
                injector=InjectorSpec(type="callback", callback="worker-b"),
            ),
        ),
    )
    a = build_gateway(cfg_a, signer=signers["A"], trust=trust)
    b = build_gateway(cfg_b, signer=signers["B"], trust=trust, callbacks={"worker-b": worker_b})
    observed: dict[str, Any] = {"sent": [], "injected_receipts": [], "replies": [], "failed": []}
    try:
        a.gateway.start()
        b.gateway.start()
        _say(console, t0, "gateways", f"A and B running (topics {prefix}*)")
        _wait(lambda: a.client.knows("worker-b") and b.client.knows("main-a"), timeout_s)
        for i in range(briefs):
            env = a.client.send(sender="main-a", to="worker-b", body=f"brief #{i + 1}".encode())
            observed["sent"].append(env.msg_id)
            _say(console, t0, "main-a", f"sent SEND {env.msg_id[:8]} -> worker-b")
        replied: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not done.is_set():
            for msg_id, body in list(worker_inbox):
                if msg_id not in replied:
                    replied.add(msg_id)
                    b.client.send(sender="worker-b", to="main-a", kind=_reply_kind(),
                                  body=b"done: " + body)
            for m in a.client.poll("main-a"):
                if m.kind == "INJECTED":
                    observed["injected_receipts"].append(m.msg_id)
                    _say(console, t0, "main-a", f"drained INJECTED {m.msg_id[:8]}")
                elif m.kind == "REPLY":
                    observed["replies"].append(m.body.decode())
                    _say(console, t0, "main-a", f"drained REPLY: {m.body.decode()!r}")
                elif m.kind == "FAILED":
                    observed["failed"].append(m.msg_id)
                    _say(console, t0, "main-a", f"[red]drained FAILED {m.msg_id[:8]}[/]")
            if len(observed["replies"]) >= briefs and len(observed["injected_receipts"]) >= briefs:
                done.set()
            time.sleep(0.01)
        observed["ok"] = done.is_set()
        _say(console, t0, "demo", "[green]complete[/]" if done.is_set() else "[red]timed out[/]")
        return observed
    finally:
        a.gateway.stop()
        b.gateway.stop()
        if cluster is not None:
            cluster.stop()


def _reply_kind() -> Any:
    from pipeline.envelope import Kind

    return Kind.REPLY


def _wait(cond: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise TimeoutError("the gateways did not see each other's presence in time")
