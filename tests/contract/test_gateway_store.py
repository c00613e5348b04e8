"""Store contract suite for the gateway's tables: the same tests on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from pipeline.host import deadlines, roster_cache, tracking
from pipeline.host.conversations import ANSWERED, Conversations
from pipeline.host.held import HeldStore, held_table
from pipeline.host.tracking import FORWARD
from pipeline.runtime.dedupe import dedupe_table, seen_ids

pytestmark = pytest.mark.postgres


def _held(
    recipient: str, msg_id: str, sender: str = "s", *, exp: int | None = None
) -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {
        "recipient": recipient,
        "msg_id": msg_id,
        "kind": "REPLY",
        "sender": sender,
        "trace_id": "t",
        "turn_id": None,
        "body": msg_id.encode(),
        "headers": None,
        "topic": "x",
        "ts_ms": now,
        "expires_at_ms": exp or now + 60_000,
        "held_at_ms": now,
    }


def test_held_and_dedupe_rows_are_unique_per_message(sessions: Any) -> None:
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("m", "1")])
        s.execute(insert(dedupe_table), [{"scope": "g", "msg_id": "1", "seen_at_ms": 1}])
    with pytest.raises(IntegrityError), sessions.begin() as s:
        s.execute(insert(held_table), [_held("m", "1")])
    with pytest.raises(IntegrityError), sessions.begin() as s:
        s.execute(insert(dedupe_table), [{"scope": "g", "msg_id": "1", "seen_at_ms": 2}])
    with sessions() as s:
        assert seen_ids(s, "g", ["1", "2"]) == {"1"}
        assert seen_ids(s, "other", ["1"]) == set()


def test_poll_drains_in_arrival_order_once_and_filters_by_sender(sessions: Any) -> None:
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("m", str(i), sender=f"w{i % 2}") for i in range(6)])
    store = HeldStore(sessions)
    assert [m.msg_id for m in store.poll("m", sender="w1")] == ["1", "3", "5"]
    assert [m.msg_id for m in store.poll("m", limit=2)] == ["0", "2"]
    assert [m.msg_id for m in store.poll("m")] == ["4"]
    assert store.poll("m") == []
    with sessions() as s:
        assert store.pending_count(s, "m") == 0


def test_concurrent_polls_never_hand_out_a_message_twice(sessions: Any) -> None:
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("m", str(i)) for i in range(200)])
    store = HeldStore(sessions)
    got: list[str] = []
    lock = threading.Lock()

    def drain() -> None:
        while True:
            batch = store.poll("m", limit=7)
            if not batch:
                return
            with lock:
                got.extend(m.msg_id for m in batch)

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=int) == [str(i) for i in range(200)]


def test_expired_rows_are_found_and_deleted(sessions: Any) -> None:
    now = int(time.time() * 1000)
    with sessions.begin() as s:
        s.execute(insert(held_table), [_held("m", "old", exp=now - 1), _held("m", "new")])
    with sessions.begin() as s:
        rows = HeldStore(sessions).expired(s, now)
        assert [r.msg_id for r in rows] == ["old"]
        HeldStore.delete_ids(s, [r.id for r in rows])
    assert [m.msg_id for m in HeldStore(sessions).poll("m")] == ["new"]


def test_turns_and_open_pulls(sessions: Any) -> None:
    conv = Conversations(sessions)
    now = int(time.time() * 1000)
    with sessions.begin() as s:
        Conversations.open_turn(
            s, turn_id="t1", asker="w", asked="m", msg_id="a", expires_at_ms=now + 60_000
        )
        Conversations.open_turn(
            s, turn_id="t2", asker="w", asked="m", msg_id="b", expires_at_ms=now - 1
        )
    with sessions() as s:
        assert Conversations.turn_waiting(s, "t1")
        assert not Conversations.turn_waiting(s, "t2"), "an expired turn is not waiting"
        assert not Conversations.turn_waiting(s, "nope")
    with sessions.begin() as s:
        assert Conversations.close_turn(s, "t1", ANSWERED)
        assert not Conversations.close_turn(s, "t1", ANSWERED), "closes once"
    with sessions() as s:
        assert not conv.has_open_pull(s, "m")
    with conv.open_pull("m", 5), sessions() as s:
        assert conv.has_open_pull(s, "m")
    with sessions() as s:
        assert not conv.has_open_pull(s, "m")


def test_forward_tracking_settles_once(sessions: Any) -> None:
    now = int(time.time() * 1000)
    with sessions.begin() as s:
        deadlines.track(
            s,
            FORWARD,
            msg_id="x",
            sender="m",
            recipient="w",
            trace_id="t",
            sent_ms=now,
            deadline_ms=now - 1,
        )
        deadlines.track(
            s,
            FORWARD,
            msg_id="y",
            sender="m",
            recipient="w",
            trace_id="t",
            sent_ms=now,
            deadline_ms=now + 60_000,
        )
    with sessions.begin() as s:
        assert [r.msg_id for r in deadlines.overdue(s, FORWARD, now)] == ["x"]
        assert deadlines.settle(s, FORWARD, "x", tracking.FAILED, "INJECT_TIMEOUT")
        assert not deadlines.settle(s, FORWARD, "x", tracking.INJECTED), "settled stays settled"
        assert deadlines.state_of(s, FORWARD, "x") == tracking.FAILED
        assert deadlines.state_of(s, FORWARD, "y") == tracking.PENDING


def test_roster_cache_lookup_honours_ttl(sessions: Any) -> None:
    now = int(time.time() * 1000)
    with sessions.begin() as s:
        roster_cache.replace_all(
            s,
            [
                roster_cache.RosterEntry("a", "H1", "main", "pull", ("g",), now + 60_000),
                roster_cache.RosterEntry("b", "H2", "worker", "inject", ("g", "h"), now - 1),
            ],
        )
    with sessions() as s:
        entry = roster_cache.lookup(s, "a", now)
        assert entry is not None and entry.host == "H1" and entry.groups == ("g",)
        assert roster_cache.lookup(s, "b", now) is None, "stale presence is not a route"
        assert roster_cache.hosts_with_group(s, "g", now) == {"H1"}
