"""The README's run command: a local broker, two gateways (hosts A and B), one conversation.

A main on host A sends briefs to a worker on host B. B's gateway commits, then injects each (a
callback injector standing in for a real agent pane) and publishes ``INJECTED``; the worker
replies. Both come back to A and are drained by the main. Every step is printed as it happens.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from pipeline.envelope import Kind, Signer
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.model import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing.rig import Rig, trust_store

Say = Callable[[str, str], None]


def _short(msg_id: str) -> str:
    """A msgId's last 8 hex digits: its first ones are its millisecond (a version-7 UUID), the
    same for every message of a minute."""
    return msg_id[-8:]


@contextlib.contextmanager
def _broker(bootstrap: str | None, say: Say) -> Iterator[str]:
    """``bootstrap`` or ``KAFKA_BOOTSTRAP`` if given, else a local KRaft broker for the demo."""
    from pipeline.kafka.local import LauncherConfig, LocalCluster, default_cluster_dir

    chosen = bootstrap or os.environ.get("KAFKA_BOOTSTRAP")
    if chosen:
        yield chosen
        return
    say("kafka", "starting a local KRaft broker (Maven Central jars)...")
    directory = default_cluster_dir().parent / "demo-kafka"
    cluster = LocalCluster(LauncherConfig(directory=directory), owned=True).start()
    say("kafka", f"Kafka {cluster.version()} ready at {cluster.bootstrap_servers}")
    try:
        yield cluster.bootstrap_servers
    finally:
        cluster.stop()


def _configs(bootstrap: str, workdir: Path) -> tuple[GatewayConfig, GatewayConfig]:
    rig = Rig(root=workdir, bootstrap=bootstrap, prefix=f"demo{int(time.time())}.")
    # the demo's keys live in memory (run_demo): no key file, no trust dir
    common: dict[str, Any] = {
        "key_file": None,
        "trust_dir": None,
        "inject_deadline_s": 20,
        "presence_interval_s": 1.0,
    }
    main_a = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    worker_b = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    return rig.config("A", (main_a,), **common), rig.config("B", (worker_b,), **common)


def run_demo(
    *,
    bootstrap: str | None = None,
    workdir: Path | None = None,
    console: Console | None = None,
    briefs: int = 3,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Run the demo; returns what was observed (tests assert on it)."""
    from pipeline.bootstrap.gateway import build_gateway

    out = console or Console()
    t0 = time.monotonic()

    def say(who: str, text: str) -> None:
        out.print(f"[dim]{time.monotonic() - t0:7.3f}s[/] [bold]{who:<10}[/] {text}")

    worker_inbox: list[tuple[str, bytes]] = []

    def worker_b(*, gid: str, msg_id: str, kind: str, sender: str, body: bytes) -> None:
        worker_inbox.append((msg_id, body))
        say("worker-b", f"injected {kind} {_short(msg_id)}: {body.decode()!r}")

    signers = {h: Signer.generate(h) for h in ("A", "B")}
    trust = trust_store(signers)
    observed: dict[str, Any] = {"sent": [], "injected_receipts": [], "replies": [], "failed": []}
    with _broker(bootstrap, say) as servers:
        cfg_a, cfg_b = _configs(servers, Path(workdir or tempfile.mkdtemp(prefix="fleet-demo-")))
        a = build_gateway(cfg_a, signer=signers["A"], trust=trust)
        b = build_gateway(cfg_b, signer=signers["B"], trust=trust, callbacks={"worker-b": worker_b})
        try:
            a.gateway.start()
            b.gateway.start()
            say("gateways", f"A and B running (topics {cfg_a.topic_prefix}*)")
            wait_until(
                lambda: a.client.knows("worker-b") and b.client.knows("main-a"),
                timeout_s=timeout_s,
                what="the gateways to see each other's presence",
                interval_s=0.05,
            )
            _converse(a, b, observed, worker_inbox, briefs=briefs, timeout_s=timeout_s, say=say)
        finally:
            a.gateway.stop()
            b.gateway.stop()
    say("demo", "[green]complete[/]" if observed["ok"] else "[red]timed out[/]")
    return observed


def _converse(
    a: Any,
    b: Any,
    observed: dict[str, Any],
    worker_inbox: list[tuple[str, bytes]],
    *,
    briefs: int,
    timeout_s: float,
    say: Say,
) -> None:
    """main-a briefs worker-b; the worker replies to each inject; main-a drains everything."""
    for i in range(briefs):
        env = a.client.send(sender="main-a", to="worker-b", body=f"brief #{i + 1}".encode())
        observed["sent"].append(env.msg_id)
        say("main-a", f"sent SEND {_short(env.msg_id)} -> worker-b")
    replied: set[str] = set()
    deadline = time.monotonic() + timeout_s
    observed["ok"] = False
    while time.monotonic() < deadline:
        for msg_id, body in list(worker_inbox):
            if msg_id not in replied:
                replied.add(msg_id)
                b.client.send(
                    sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"done: " + body
                )
        for m in a.client.poll("main-a"):
            text = m.body.decode(errors="replace")
            if m.kind == "INJECTED":
                observed["injected_receipts"].append(m.msg_id)
                say("main-a", f"drained INJECTED {_short(m.msg_id)}")
            elif m.kind == "REPLY":
                observed["replies"].append(text)
                say("main-a", f"drained REPLY: {text!r}")
            elif m.kind == "FAILED":
                observed["failed"].append(m.msg_id)
                say("main-a", f"[red]drained FAILED {_short(m.msg_id)}[/]")
        if len(observed["replies"]) >= briefs and len(observed["injected_receipts"]) >= briefs:
            observed["ok"] = True
            return
        time.sleep(0.01)
