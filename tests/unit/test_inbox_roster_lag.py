"""A sender the roster does not know yet is not refused before the roster has read up to it.

Records cross topics in no common order: a peer's first record after its (re)start can reach
this host's inbox before its heartbeat reaches this host's roster. Seen in CI's strict
clean-restart chaos pass: ASKs sent while host A restarted cleanly were dead-lettered
``UNKNOWN_SENDER`` at B (A's senders read as departed since its tombstones), although A's
relay had shipped them only after A's new presence was on the broker. The inbox waits (bounded)
until the roster has read every presence record produced before the record, then verifies again;
a sender still unknown then is refused as before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pipeline.envelope import Envelope, Kind, Signer, TrustStore, encode
from pipeline.kafka.topics import TopicNames
from pipeline.runtime import Record, Staged
from pipeline.runtime.outcomes import ACK, DeadLetter
from pipeline.store import make_engine
from pipeline.testing import pull_inbox


class _LaggingRoster:
    """host_of + horizon_ms, as the gateway's roster view offers them; bindings set by a test."""

    def __init__(self, bindings: dict[str, str], horizon_ms: int) -> None:
        self.bindings, self.horizon = dict(bindings), horizon_ms
        self.asked = 0  # how often the inbox read the horizon

    def host_of(self, gid: str) -> str | None:
        return self.bindings.get(gid)

    def horizon_ms(self) -> int:
        self.asked += 1
        return self.horizon


def _inbox_and_record(tmp_path: Path, roster: _LaggingRoster, sender: str, threads: int = 1):  # type: ignore[no-untyped-def]
    signer = Signer.generate("A")
    trust = TrustStore()
    trust.add(signer.host, signer.key_id, signer.public_key_bytes)
    topics = TopicNames(prefix="t.")
    engine = make_engine(f"sqlite:///{tmp_path / 'B.sqlite'}")
    inbox = pull_inbox(engine, host="B", topics=topics, trust=trust, mains=("main-b",),
                       senders={"main-a": "A"}, verify_threads=threads)  # fmt: skip
    inbox.handler.verifier.presence = roster
    env = Envelope.new(kind=Kind.REPLY, sender=sender, to="main-b", body=b"hi", ttl_s=600)
    key, headers, value = encode(env, topic=topics.inbox("B"), signer=signer)
    now_ms = int(time.time() * 1000)
    record = Record(topic=topics.inbox("B"), partition=0, offset=7, key=key, value=value,
                    headers=tuple(headers), timestamp_ms=now_ms)  # fmt: skip
    return inbox, record, engine


def test_a_sender_whose_presence_the_roster_has_not_read_yet_is_held_once_it_has(
    tmp_path: Path,
) -> None:
    now_ms = int(time.time() * 1000)
    roster = _LaggingRoster({"main-b": "B"}, horizon_ms=now_ms - 2_000)  # read up to 2 s ago
    inbox, record, engine = _inbox_and_record(tmp_path, roster, "main-a2")

    def follower_catches_up() -> None:
        time.sleep(0.3)
        roster.bindings["main-a2"] = "A"  # A's new heartbeat, applied
        roster.horizon = int(time.time() * 1000)

    t = threading.Thread(target=follower_catches_up)
    t.start()
    try:
        outcome = inbox.handler.handle(record, Staged())
    finally:
        t.join()
        inbox.close()
        engine.dispose()
    assert outcome is ACK


def test_a_sender_still_unknown_once_the_roster_has_read_past_the_record_is_refused(
    tmp_path: Path,
) -> None:
    roster = _LaggingRoster({"main-b": "B"}, horizon_ms=int(time.time() * 1000) + 60_000)
    inbox, record, engine = _inbox_and_record(tmp_path, roster, "main-nobody")
    try:
        outcome = inbox.handler.handle(record, Staged())
    finally:
        inbox.close()
        engine.dispose()
    assert isinstance(outcome, DeadLetter) and outcome.reason == "UNKNOWN_SENDER"
    assert roster.asked == 1, "the roster had read past the record: no wait, no second verify"


def test_a_batch_verified_before_the_roster_caught_up_is_judged_by_the_roster_of_then(
    tmp_path: Path,
) -> None:
    """The gateway verifies a batch ahead of its transaction (``prepare``, a thread pool). Seen
    in a 20-repetition clean-restart chaos run: A's first ASK after its restart was verified
    while B's roster still read A's senders as tombstoned; by the time the batch was handled the
    roster had caught up past the record, so the inbox judged "it has read that far already"
    and let the stale refusal stand (`UNKNOWN_SENDER` under a clean restart). The horizon that
    counts is the one the verification saw."""
    now_ms = int(time.time() * 1000)
    roster = _LaggingRoster({"main-b": "B"}, horizon_ms=now_ms - 2_000)
    inbox, record, engine = _inbox_and_record(tmp_path, roster, "main-a2", threads=2)
    try:
        inbox.handler.prepare([record])  # verified now: main-a2 unknown, horizon behind
        roster.bindings["main-a2"] = "A"  # then the follower applies A's heartbeat ...
        roster.horizon = int(time.time() * 1000) + 1_000  # ... and reads past the record
        outcome = inbox.handler.handle(record, Staged())
    finally:
        inbox.close()
        engine.dispose()
    assert outcome is ACK
