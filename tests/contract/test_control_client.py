"""The requester side of a SPAWN (R-SPAWN-3): one signed outbox row on
``fleet.control.<host>`` plus a spawn-request row with its deadline, in one transaction; an
unknown host is an immediate ``UNKNOWN_HOST``. Same tests on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from pipeline import schemas
from pipeline.control import SPAWN, UNKNOWN_HOST, ControlClient, requests, spawn_requests_table
from pipeline.envelope import BoundedSeenSet, Kind, Signer, TrustStore, Verifier
from pipeline.errors import DeliveryError
from pipeline.host import deadlines, roster_cache
from pipeline.host.deadlines import Deadlines
from pipeline.host.outbound import Publisher
from pipeline.host.senders import LocalSenders
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.tables import outbox
from pipeline.presence.static import StaticPresence
from pipeline.record_headers import unpack_headers
from pipeline.store import make_engine, session_factory

pytestmark = pytest.mark.postgres
FAR = 10**15


@pytest.fixture
def parts(store_url: str) -> Any:
    engine = make_engine(store_url)
    sessions = session_factory(engine)
    a, b = Signer.generate("A"), Signer.generate("B")
    with sessions.begin() as s:
        roster_cache.replace_all(
            s,
            [
                roster_cache.RosterEntry("B._gateway", "B", "gateway", "none", (), FAR),
                roster_cache.RosterEntry("main-a", "A", "main", "pull", (), FAR),
            ],
        )
    client = ControlClient(
        sessions=sessions,
        publisher=Publisher(host="A", signer=a, topics=TopicNames()),
        deadline_s=30.0,
        local_senders=LocalSenders(host="A", configured=frozenset({"main-a"})),
    )
    trust = TrustStore()
    for signer in (a, b):
        trust.add(signer.host, signer.key_id, signer.public_key_bytes)
    yield client, sessions, trust
    engine.dispose()


def test_spawn_writes_a_signed_control_record_and_a_pending_request(parts: Any) -> None:
    client, sessions, trust = parts
    req = client.spawn(
        requester="main-a", host="B", profile="shell", spawn_id="w-1", job="j1", budget=5000
    )
    with sessions() as s:
        (row,) = s.execute(select(outbox)).all()
        assert deadlines.state_of(s, SPAWN, req.msg_id) == requests.PENDING
        tracked = s.execute(select(spawn_requests_table)).one()
    assert row.topic == "fleet.control.B" and bytes(row.key) == b"B._gateway"
    verifier = Verifier(
        host="B", trust=trust, presence=StaticPresence({"main-a": "A"}), seen=BoundedSeenSet()
    )
    got = verifier.verify(
        topic=row.topic, key=bytes(row.key), headers=unpack_headers(row.headers),
        value=bytes(row.value),
    )  # fmt: skip
    env = got.envelope
    assert (env.kind, env.spawn_id, env.msg_id, got.signer_host) == (
        Kind.SPAWN, "w-1", req.msg_id, "A")  # fmt: skip
    body = schemas.decode("spawn", env.body)
    assert (body["parent"], body["job"], body["budget"], body["profile"]) == (
        "main-a", "j1", 5000, "shell")  # fmt: skip
    assert (tracked.spawn_id, tracked.host, tracked.deadline_ms) == ("w-1", "B", req.deadline_ms)
    assert req.deadline_ms == env.ts_ms + 30_000


def test_unknown_host_is_an_immediate_error_and_writes_nothing(parts: Any) -> None:
    client, sessions, _ = parts
    with pytest.raises(DeliveryError) as err:
        client.spawn(requester="main-a", host="C", profile="shell")
    assert err.value.reason == UNKNOWN_HOST
    with pytest.raises(DeliveryError) as err:
        client.spawn(requester="someone-else", host="B", profile="shell")
    assert err.value.reason == "NOT_LOCAL_SENDER"
    with sessions() as s:
        assert s.execute(select(outbox)).all() == []
        assert s.execute(select(spawn_requests_table)).all() == []


def test_a_request_settles_once(parts: Any) -> None:
    client, sessions, _ = parts
    req = client.spawn(requester="main-a", host="B", profile="shell")
    with sessions.begin() as s:
        assert [r.msg_id for r in deadlines.overdue(s, SPAWN, req.deadline_ms + 1)] == [req.msg_id]
        assert deadlines.settle(s, SPAWN, req.msg_id, requests.FAILED, "SPAWN_TIMEOUT")
        assert not deadlines.settle(s, SPAWN, req.msg_id, requests.SPAWNED)
        assert deadlines.overdue(s, SPAWN, req.deadline_ms + 1) == []
        assert deadlines.state_of(s, SPAWN, req.msg_id) == requests.FAILED


def test_no_outcome_by_the_deadline_is_exactly_one_failed(parts: Any) -> None:
    """R-SPAWN-3, priced like R-ACK-5: no answer in time = exactly one FAILED at the requester."""
    from pipeline.control import SPAWN_TIMEOUT
    from pipeline.envelope.receipts import read_receipt
    from pipeline.host.held import HeldStore

    client, sessions, _ = parts
    req = client.spawn(requester="main-a", host="B", profile="shell", spawn_id="w-9")
    duty = Deadlines(sessions=sessions, gateway_id="A._gateway", kinds=(SPAWN,))
    assert duty.tick(req.deadline_ms - 1) == 0
    assert duty.tick(req.deadline_ms + 1) == 1
    assert duty.tick(req.deadline_ms + 2) == 0  # settled once: never a second FAILED
    (msg,) = HeldStore(sessions).poll("main-a")
    receipt = read_receipt("FAILED", msg.body)
    assert (msg.kind, msg.msg_id, msg.sender) == ("FAILED", f"failed-{req.msg_id}", "A._gateway")
    assert (receipt.msg_id, receipt.recipient, receipt.reason) == (req.msg_id, "w-9", SPAWN_TIMEOUT)


def test_a_reported_failed_held_first_is_not_doubled_by_the_deadline(parts: Any) -> None:
    """The DLQ reporter's FAILED for a dead-lettered SPAWN has msgId failed-<SPAWN msgId>, as
    the deadline's does: one FAILED, and the duty does not wedge on the unique held row."""
    from sqlalchemy import insert

    from pipeline.host.held import HeldStore, held_table

    client, sessions, _ = parts
    req = client.spawn(requester="main-a", host="B", profile="shell")
    row = {"recipient": "main-a", "msg_id": f"failed-{req.msg_id}", "kind": "FAILED",
           "sender": "B._gateway", "trace_id": None, "turn_id": None, "body": b"x",
           "headers": None, "topic": None, "ts_ms": 1, "expires_at_ms": FAR, "held_at_ms": 1}  # fmt: skip
    with sessions.begin() as s:
        s.execute(insert(held_table), [row])
    duty = Deadlines(sessions=sessions, gateway_id="A._gateway", kinds=(SPAWN,))
    assert duty.tick(req.deadline_ms + 1) == 0
    assert duty.tick(req.deadline_ms + 2) == 0
    assert [m.sender for m in HeldStore(sessions).poll("main-a")] == ["B._gateway"]
    with sessions() as s:
        assert deadlines.state_of(s, SPAWN, req.msg_id) == requests.FAILED
