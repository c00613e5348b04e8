"""Traces across two gateways as processes, exported over OTLP/HTTP to a receiver on loopback
(docs/observability.md, "Tracing").

Host A runs ``main-a`` (pull); host B runs ``main-b`` (pull) and ``worker-b`` (inject: a command
injector whose worker answers its brief with ``fleet send --kind REPLY``, no ``--trace``: it
continues the brief's trace through ``FLEET_TRACE_ID``). Asserted on the spans received:

* main-a's ASK and main-b's ANSWER are one trace (the ASK's traceId), with the parent links
  send -> outbox.commit -> relay.produce -> (other gateway) inbox.consume -> hold on each hop;
* a brief to worker-b and its INJECTED are one trace: ... inbox.consume -> inject (outcome
  ``injected``) -> receipt.stage -> outbox.commit -> relay.produce -> (A) inbox.consume;
* the worker's REPLY is in its brief's trace.

``FLEET_TRACE_CAPTURE=<dir>`` keeps the printed trees (docs/observability.md shows one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.chaos.gateway_process import GatewayProc
from pipeline.support.processes import fleet_env
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from pipeline.testing.otel_collector import OtelCollector, trace_target
from pipeline.testing.otlp_receiver import OtlpReceiver, ReceivedSpan, tree
from pipeline.tracing import names as n
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CAPTURE = os.environ.get("FLEET_TRACE_CAPTURE")


def _pull(gid: str) -> str:
    return f'[[entities]]\ngid = "{gid}"\nrole = "main"\ndelivery = "pull"\n'


def _replying_worker(gid: str, config: Path, log: Path) -> str:
    """A command injector whose worker REPLYs to main-a through `fleet send` (its environment
    has FLEET_TRACE_ID, so the REPLY continues the brief's trace)."""
    send = f"{sys.executable} -m pipeline send -c {config} --from {gid} --to main-a --kind REPLY"
    script = f"echo $FLEET_TRACE_ID >> {log}; {send} done-$FLEET_MSG_ID >> {log} 2>&1"
    return (
        f'[[entities]]\ngid = "{gid}"\nrole = "worker"\ndelivery = "inject"\n'
        '[entities.injector]\ntype = "command"\n'
        f'command = ["sh", "-c", {json.dumps(script)}]\ntimeout_s = 60.0\n'
    )


@dataclass
class Traced:
    a: Path
    b: Path
    receiver: OtelCollector | OtlpReceiver
    worker_log: Path

    def fleet(self, *args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "pipeline", *args, "--json"],
            env=fleet_env(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr + done.stdout
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.receiver.spans() if s.trace_id == trace_id]


@pytest.fixture(scope="module")
def traced(kafka: BrokerHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    root = tmp_path_factory.mktemp("traced")
    fleet = Fleet.create(root, kafka.bootstrap, ("A", "B"))
    receiver = trace_target().start()  # the real collector where it is built
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within a tenth of a second, not five
    }
    a = fleet.config_file("A", _pull("main-a"))
    b_path = root / "B-0.toml"  # the path config_file gives B's first file: the worker names it
    worker_log = root / "worker.log"
    b = fleet.config_file("B", _pull("main-b") + _replying_worker("worker-b", b_path, worker_log))
    assert b == b_path
    procs = [
        GatewayProc(a, root / "A.log", env).start(),
        GatewayProc(b, root / "B.log", env).start(),
    ]
    t = Traced(a=a, b=b, receiver=receiver, worker_log=worker_log)
    try:
        for p in procs:
            wait_until(p.ready, timeout_s=90, what=f"{p.config.stem} running")

        def live() -> bool:
            snap = t.fleet("top", "-c", str(a), "-c", str(b), "--once")
            gids = {e["gid"] for e in snap["entities"] if e["live"]}
            return {"main-a", "main-b", "worker-b"} <= gids

        wait_until(live, timeout_s=60, what="main-a, main-b and worker-b in A's roster")
        yield t
    finally:
        for p in procs:
            p.stop()
        receiver.stop()


Want = tuple[str, str, str]  # (span name, the gateway that exported it, the msgId it is about)


def _one(spans: list[ReceivedSpan], name: str, service: str, msg_id: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name and s.service == service
             and s.attributes.get(n.MESSAGE_ID) == msg_id]  # fmt: skip
    assert len(found) == 1, (name, service, msg_id, tree(spans))
    return found[0]


def _hop(spans: list[ReceivedSpan], msg_id: str, sender: str, receiver: str,
         *, root: bool = True) -> tuple[ReceivedSpan, ReceivedSpan]:  # fmt: skip
    """The spans of one message from gateway ``sender`` to ``receiver``, their parent links
    asserted; (the sender's outbox.commit, the receiver's inbox.consume)."""
    commit = _one(spans, n.OUTBOX_COMMIT, sender, msg_id)
    if root:
        send = _one(spans, n.SEND, sender, msg_id)
        assert commit.parent_span_id == send.span_id
    produce = _one(spans, n.RELAY_PRODUCE, sender, msg_id)
    consume = _one(spans, n.INBOX_CONSUME, receiver, msg_id)
    assert produce.parent_span_id == commit.span_id
    assert consume.parent_span_id == produce.span_id  # across processes: the traceparent header
    return commit, consume


def _hop_spans(msg_id: str, sender: str, receiver: str, *, root: bool = True) -> set[Want]:
    """What :func:`_hop` asserts on, as (name, exporting gateway, msgId)."""
    sent = {(n.SEND, sender, msg_id)} if root else set()
    return sent | {(n.OUTBOX_COMMIT, sender, msg_id), (n.RELAY_PRODUCE, sender, msg_id),
                   (n.INBOX_CONSUME, receiver, msg_id)}  # fmt: skip


def _received(t: Traced, trace_id: str, wanted: set[Want]) -> list[ReceivedSpan]:
    """The trace's spans once every one of ``wanted`` has arrived: each gateway exports its own
    spans in its own batches (a tenth of a second apart, later under load), so one gateway's
    last span says nothing of what the other has sent yet."""

    def arrived() -> list[ReceivedSpan] | None:
        spans = t.trace(trace_id)
        got = {(s.name, s.service, s.attributes.get(n.MESSAGE_ID)) for s in spans}
        return spans if wanted <= got else None

    spans: list[ReceivedSpan] = wait_until(
        arrived, timeout_s=60, what=f"every span of trace {trace_id} the test checks"
    )
    return spans


def _keep(name: str, spans: list[ReceivedSpan]) -> None:
    text = tree(spans)
    print(f"\n{name}\n{text}")
    if CAPTURE:
        Path(CAPTURE, f"{name}.txt").write_text(text + "\n")


def test_an_ask_and_its_answer_are_one_trace(traced: Traced) -> None:
    poll = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "poll", "-c", str(traced.b), "--as", "main-b",
         "--wait", "60", "--json"],
        env=fleet_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # main-b's open pull must be registered before the ASK arrives (else NO_WAITER)
        wait_until(lambda: _pull_open(traced), timeout_s=30, what="main-b's open pull")
        asked = traced.fleet(
            "ask", "-c", str(traced.a), "--from", "main-a", "--to", "main-b", "why?"
        )
        out, _err = poll.communicate(timeout=90)
    finally:
        if poll.poll() is None:
            poll.kill()
    (ask,) = [m for m in json.loads(out) if m["msgId"] == asked["msgId"]]
    trace_id = ask["traceId"]
    answered = traced.fleet("answer", "-c", str(traced.b), "--from", "main-b", "--to", "main-a",
                            "--turn", ask["turnId"], "because")  # fmt: skip
    answer_id = answered["msgId"]
    spans = _received(
        traced,
        trace_id,
        _hop_spans(asked["msgId"], "A", "B") | {(n.HOLD, "B", asked["msgId"])}
        | _hop_spans(answer_id, "B", "A") | {(n.HOLD, "A", answer_id)},
    )  # fmt: skip
    _keep("ask-answer", spans)
    _, consume_b = _hop(spans, asked["msgId"], "A", "B")
    assert _one(spans, n.HOLD, "B", asked["msgId"]).parent_span_id == consume_b.span_id
    _, consume_a = _hop(spans, answer_id, "B", "A")
    assert _one(spans, n.HOLD, "A", answer_id).parent_span_id == consume_a.span_id
    assert {s.trace_id for s in spans} == {trace_id}


def _pull_open(t: Traced) -> bool:
    from sqlalchemy import create_engine, text

    from pipeline.host.config import load_config

    engine = create_engine(load_config(t.b).store_url)
    try:
        with engine.connect() as c:
            rows = c.execute(text("SELECT count(*) FROM fleet_waiters WHERE gid = 'main-b'"))
            return bool(rows.scalar())
    finally:
        engine.dispose()


def test_a_brief_its_injected_and_the_workers_reply_are_one_trace(traced: Traced) -> None:
    sent = traced.fleet(
        "send", "-c", str(traced.a), "--from", "main-a", "--to", "worker-b", "do it"
    )
    brief_id, trace_id = sent["msgId"], sent["traceId"]

    def replied() -> list[dict[str, Any]]:
        got = traced.fleet("poll", "-c", str(traced.a), "--as", "main-a")
        return [m for m in got if m["kind"] in ("INJECTED", "REPLY") and m["traceId"] == trace_id]

    held: list[dict[str, Any]] = []
    wait_until(lambda: len(held.extend(replied()) or held) >= 2, timeout_s=90,
               what="main-a holds the brief's INJECTED and worker-b's REPLY")  # fmt: skip
    injected = next(m for m in held if m["kind"] == "INJECTED")
    reply = next(m for m in held if m["kind"] == "REPLY")
    assert traced.worker_log.read_text().split()[0] == trace_id  # FLEET_TRACE_ID, as injected

    receipt_id, reply_id = injected["msgId"], reply["msgId"]
    spans = _received(
        traced,
        trace_id,
        _hop_spans(brief_id, "A", "B") | {(n.INJECT, "B", brief_id)}
        | {(n.RECEIPT_STAGE, "B", receipt_id), (n.HOLD, "A", receipt_id)}
        | _hop_spans(receipt_id, "B", "A", root=False)
        | _hop_spans(reply_id, "B", "A") | {(n.HOLD, "A", reply_id)},
    )  # fmt: skip
    _keep("brief-injected-reply", spans)
    _, consume = _hop(spans, brief_id, "A", "B")
    inject = _one(spans, n.INJECT, "B", brief_id)
    assert inject.parent_span_id == consume.span_id
    assert inject.attributes[n.INJECT_OUTCOME] == "injected"
    stage = _one(spans, n.RECEIPT_STAGE, "B", injected["msgId"])
    assert stage.parent_span_id == inject.span_id
    receipt_commit, receipt_consume = _hop(spans, injected["msgId"], "B", "A", root=False)
    assert receipt_commit.parent_span_id == stage.span_id
    assert _one(spans, n.HOLD, "A", injected["msgId"]).parent_span_id == receipt_consume.span_id
    # the worker's own send, through `fleet send` with FLEET_TRACE_ID: the brief's trace
    _, reply_consume = _hop(spans, reply["msgId"], "B", "A")
    assert _one(spans, n.HOLD, "A", reply["msgId"]).parent_span_id == reply_consume.span_id
