"""A receipt settles its sender's tracked send -- for a main and for a worker alike -- and an
``INJECTED`` only from the host the send went to (docs/gateway.md, "Receipts").

Production code on both sides: host A's client tracks the brief, host B's inject queue injects
it and stages the receipt, host A's inbox handler takes it; only the injections into A's own
worker are a fake.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import select, update

from pipeline.bootstrap.client import build_client
from pipeline.envelope import Envelope, Kind, Signer
from pipeline.envelope.headers import parse
from pipeline.envelope.receipts import failed_receipt, read_receipt
from pipeline.envelope.verify import Verified
from pipeline.gateway.entities import LocalEntities
from pipeline.gateway.inbound import InboxHandler
from pipeline.gateway.injectors import CallbackInjector
from pipeline.gateway.metrics import GatewayMetrics
from pipeline.host import deadlines, roster_cache
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.held import held_table
from pipeline.host.tracking import FORWARD, forward_table
from pipeline.outbox.tables import outbox
from pipeline.presence.model import Delivery, Role
from pipeline.record_headers import unpack_headers
from pipeline.runtime import Record, Staged
from pipeline.runtime.outcomes import Ack, DeadLetter
from pipeline.store import make_engine, read_sessions, session_factory
from tests.unit.test_inject_journal import queue_into

FAR = 10**15


def _raise() -> None:
    raise  # noqa: PLE0704


def _host_a(tmp_path: Path) -> tuple[Any, Any]:
    """Host A: main-a (pull) and worker-a (inject); the roster knows worker-b (inject) on B."""
    engine = make_engine(f"sqlite:///{tmp_path / 'A.sqlite'}")
    with session_factory(engine).begin() as s:
        roster_cache.replace_all(
            s, [roster_cache.RosterEntry("worker-b", "B", "worker", "inject", (), FAR)]
        )
    cfg = GatewayConfig(
        host="A",
        entities=(
            EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),
            EntityConfig(gid="worker-a", role=Role.WORKER, delivery=Delivery.INJECT,
                         injector=InjectorSpec(type="command", command=("cat",))),
        ),
    )  # fmt: skip
    return build_client(cfg, signer=Signer.generate("A"), engine=engine), engine


def _receipts_from_b(brief: Envelope, tmp_path: Path) -> list[Envelope]:
    """Gateway B's real inject queue injects ``brief`` into worker-b; the receipt(s) it stages
    in B's outbox, parsed back into envelopes."""
    engine_b = make_engine(f"sqlite:///{tmp_path / 'B.sqlite'}")
    q, _ = queue_into(engine_b, lambda **kw: None)
    q.submit("worker-b", brief, reply_host="A")
    for _ in range(400):
        if q.idle():
            break
        threading.Event().wait(0.01)
    q.stop()
    out = []
    with engine_b.connect() as c:
        for r in c.execute(select(outbox.c.headers, outbox.c.value).order_by(outbox.c.id)):
            fields = {k: bytes(v) for k, v in unpack_headers(bytes(r.headers))}
            out.append(parse(fields, bytes(r.value), {}))
    engine_b.dispose()
    return out


def _inbox_a(engine: Any, submitted: list[tuple[str, Envelope]]) -> InboxHandler:
    """Host A's real inbox handler over A's real entities (only the injections are a fake)."""
    entities = LocalEntities()
    entities.register(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL)
    entities.register(gid="worker-a", role=Role.WORKER, delivery=Delivery.INJECT,
                      injector=CallbackInjector(lambda **kw: None))  # fmt: skip

    class Injections:
        def submit(self, gid: str, env: Envelope, *, reply_host: str | None) -> None:
            submitted.append((gid, env))

    h = InboxHandler(
        host="A", verifier=None, entities=entities, publisher=None,  # type: ignore[arg-type]
        conversations=None, injections=Injections(), reads=read_sessions(engine),  # type: ignore[arg-type]
        metrics=GatewayMetrics(CollectorRegistry()), seen=type("S", (), {"add_all": lambda *a: None})(),
        tracked=(FORWARD,),
    )  # fmt: skip
    h._held.refreshed = float("inf")
    return h


def _deliver(handler: InboxHandler, engine: Any, receipt: Envelope, signer: str = "B") -> Any:
    """``receipt`` through A's inbox handler as verified, signed by host ``signer``."""
    rec = Record(topic="inbox.A", partition=0, offset=1, key=receipt.to.encode(), value=b"",
                 headers=(), timestamp_ms=0)  # fmt: skip
    handler._prepared[(rec.topic, rec.partition, rec.offset)] = Verified(receipt, signer, "k")
    tx = Staged()
    out = handler.handle(rec, tx)
    with session_factory(engine).begin() as s:
        tx.flush(s)
    tx.run_effects(committed=True, on_error=_raise)
    return out


def _held(engine: Any) -> list[tuple[str, str]]:
    with session_factory(engine)() as s:
        return [(r.recipient, r.kind) for r in s.execute(select(held_table))]


def _timeouts(engine: Any, brief: Envelope) -> int:
    """The deadline duty, long after the brief's deadline: the FAILEDs it holds."""
    duty = deadlines.Deadlines(
        sessions=session_factory(engine), gateway_id="A._gateway", kinds=(FORWARD,)
    )
    return duty.tick(now_ms=brief.expires_at_ms + 10**9)


def _row(engine: Any, msg_id: str) -> tuple[str, str | None]:
    with session_factory(engine)() as s:
        r = s.execute(select(forward_table).where(forward_table.c.msg_id == msg_id)).one()
        return str(r.state), r.reason


@pytest.mark.parametrize("sender", ["main-a", "worker-a"])
def test_an_injected_settles_the_tracked_brief_of_a_main_and_of_a_worker(
    tmp_path: Path, sender: str
) -> None:
    """R-ACK-5: no INJECTED in time is a FAILED -- so an INJECTED in time is never one. A worker
    that briefed another worker was told INJECT_TIMEOUT at its deadline though its brief was
    injected: its receipt was injected into it, its tracking row left pending."""
    client, engine = _host_a(tmp_path)
    brief = client.send(sender=sender, to="worker-b", body=b"do it")
    assert _row(engine, brief.msg_id) == (deadlines.PENDING, None), "the send is tracked"
    receipts = _receipts_from_b(brief, tmp_path)
    assert [(e.kind, e.to, read_receipt("INJECTED", e.body).msg_id) for e in receipts] == [
        (Kind.INJECTED, sender, brief.msg_id)
    ], "B injected it and addressed one INJECTED to the sender"

    submitted: list[tuple[str, Envelope]] = []
    assert isinstance(_deliver(_inbox_a(engine, submitted), engine, receipts[0]), Ack)
    assert _row(engine, brief.msg_id) == ("injected", None)
    assert _timeouts(engine, brief) == 0, "no INJECT_TIMEOUT after the INJECTED"
    if sender == "worker-a":  # the receipt reaches the worker as before: injected
        assert [(g, e.msg_id) for g, e in submitted] == [("worker-a", receipts[0].msg_id)]
        assert _held(engine) == []
    else:
        assert submitted == [] and _held(engine) == [("main-a", "INJECTED")]
    engine.dispose()


@pytest.mark.parametrize("sender", ["main-a", "worker-a"])
def test_an_injected_signed_by_another_host_is_refused_and_settles_nothing(
    tmp_path: Path, sender: str
) -> None:
    """A brief to worker-b went to host B; host C's gateway cannot have injected it. Its
    INJECTED is dead-lettered SIGNER_MISMATCH: the brief stays pending (its deadline, or B's
    own receipt, decides), nothing is held or injected."""
    client, engine = _host_a(tmp_path)
    brief = client.send(sender=sender, to="worker-b", body=b"do it")
    forged = _receipts_from_b(brief, tmp_path)[0]
    submitted: list[tuple[str, Envelope]] = []
    handler = _inbox_a(engine, submitted)
    out = _deliver(handler, engine, forged, signer="C")
    assert isinstance(out, DeadLetter) and out.reason == "SIGNER_MISMATCH"
    assert "host B" in out.error and "host C" in out.error
    assert _row(engine, brief.msg_id) == (deadlines.PENDING, None)
    assert submitted == [] and _held(engine) == []
    # B's own receipt still settles it
    assert isinstance(_deliver(handler, engine, forged, signer="B"), Ack)
    assert _row(engine, brief.msg_id) == ("injected", None)
    engine.dispose()


def test_a_failed_from_any_gateway_settles_and_a_row_from_before_the_host_column_takes_any(
    tmp_path: Path,
) -> None:
    """The FAILED reporter is one consumer group across hosts: the FAILED about a brief
    dead-lettered at B may be signed by C. And a tracking row written before 0.13 has no host:
    an INJECTED settles it from any gateway, as before."""
    client, engine = _host_a(tmp_path)
    brief = client.send(sender="main-a", to="worker-b", body=b"do it")
    failed = failed_receipt(
        about=brief.msg_id,
        recipient="worker-b",
        sender="C._gateway",
        to="main-a",
        reason="RECIPIENT_GONE",
        error="worker-b was stopped on B",
        stage="delivery",
        ttl_s=60,
        trace_id=brief.trace_id,
    )
    handler = _inbox_a(engine, [])
    assert isinstance(_deliver(handler, engine, failed, signer="C"), Ack)
    assert _row(engine, brief.msg_id) == (deadlines.FAILED, "RECIPIENT_GONE")

    old = client.send(sender="main-a", to="worker-b", body=b"again")
    with session_factory(engine).begin() as s:
        s.execute(
            update(forward_table).where(forward_table.c.msg_id == old.msg_id).values(host=None)
        )
    injected = _receipts_from_b(old, tmp_path)[0]
    assert isinstance(_deliver(handler, engine, injected, signer="C"), Ack)
    assert _row(engine, old.msg_id) == ("injected", None)
    engine.dispose()


@pytest.mark.parametrize("sender", ["main-a", "worker-a"])
def test_a_remote_failed_after_the_deadlines_is_dropped_for_a_main_and_a_worker(
    tmp_path: Path, sender: str
) -> None:
    """R-ACK-5: exactly one FAILED per send, at the sender. The deadline's FAILED came first
    (held for a main, injected into a worker: tests/contract/test_gateway_nudge_store.py); the
    reporter's FAILED about the same brief, arriving after it, is dropped for both."""
    client, engine = _host_a(tmp_path)
    brief = client.send(sender=sender, to="worker-b", body=b"do it")
    assert _timeouts(engine, brief) == 1
    late = failed_receipt(
        about=brief.msg_id, recipient="worker-b", sender="B._gateway", to=sender,
        reason="RECIPIENT_GONE", error="worker-b was stopped on B", stage="delivery",
        ttl_s=60, trace_id=brief.trace_id,
    )  # fmt: skip
    submitted: list[tuple[str, Envelope]] = []
    assert isinstance(_deliver(_inbox_a(engine, submitted), engine, late, signer="B"), Ack)
    assert submitted == [], "a second FAILED injected into the worker"
    assert _row(engine, brief.msg_id) == (deadlines.FAILED, "INJECT_TIMEOUT")
    held = [kind for recipient, kind in _held(engine) if recipient == sender]
    assert held == ["FAILED"], "only the deadline's FAILED (held by this test's duty)"
    engine.dispose()
