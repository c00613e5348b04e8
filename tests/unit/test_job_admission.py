"""The job ledger's fold and codec (R-SPAWN-7): a job's caps counted across every host."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pipeline.control.job_admission import Claim, JobBook, Release
from pipeline.control.job_ledger import JobLedger, LedgerUnavailable, decode, encode
from pipeline.envelope import Signer, TrustStore


def claim(gid: str, host: str, *, job: str = "j1", live: int = 2, spawns: int = 10) -> Claim:
    return Claim(
        job=job, spawn_id=gid, host=host, profile="shell", max_live=live, max_spawns=spawns,
        at_ms=1,
    )  # fmt: skip


def test_the_order_of_the_partition_decides_and_no_two_hosts_take_the_last_slot() -> None:
    """R-SPAWN-7: six claims from three hosts against a live cap of 2: the first two in log
    order are admitted whatever host made them, the rest refused naming the fleet-wide count."""
    order = [claim(f"w{i}", "ABC"[i % 3]) for i in range(6)]
    book = JobBook()
    for c in order:
        book.apply(c)
    assert [book.verdicts[c.spawn_id].admitted for c in order] == [True, True] + [False] * 4
    assert "across the fleet: 2 of 2" in book.verdicts["w5"].detail
    assert book.live("j1", "shell") == 2


def test_every_reader_of_the_same_log_reaches_the_same_verdicts() -> None:
    """R-SPAWN-7: a verdict is a function of the log prefix only: any interleaving of claims
    and releases folds to the same verdicts on every host, and never more live than the cap."""
    records: list[Claim | Release] = [claim(f"w{i}", "ABC"[i % 3]) for i in range(5)]
    records.insert(3, Release(job="j1", spawn_id="w0", host="A"))
    for perm in itertools.islice(itertools.permutations(records), 0, 720, 7):
        books = [JobBook(), JobBook()]
        for book in books:
            for r in perm:
                book.apply(r)
                assert book.live("j1", "shell") <= 2
        assert books[0].verdicts == books[1].verdicts


def test_a_repeated_claim_keeps_its_first_verdict_and_a_release_frees_live_not_budget() -> None:
    """R-SPAWN-7: a redelivered SPAWN claims again and changes nothing; a release by another
    host is ignored; the budget (max_spawns) counts released spawns too."""
    book = JobBook()
    book.apply(claim("w0", "A", live=1, spawns=2))
    book.apply(claim("w1", "B", live=1, spawns=2))
    book.apply(claim("w0", "A", live=1, spawns=2))  # the repeat
    assert book.verdicts["w0"].admitted and not book.verdicts["w1"].admitted
    book.apply(Release(job="j1", spawn_id="w0", host="B"))  # not B's claim: ignored
    book.apply(claim("w2", "B", live=1, spawns=2))
    assert not book.verdicts["w2"].admitted
    book.apply(Release(job="j1", spawn_id="w0", host="A"))
    book.apply(claim("w3", "C", live=1, spawns=2))
    book.apply(Release(job="j1", spawn_id="w3", host="C"))
    book.apply(claim("w4", "C", live=1, spawns=2))
    assert book.verdicts["w3"].admitted and not book.verdicts["w4"].admitted
    assert "spawns of job j1 across the fleet: 2 of 2" in book.verdicts["w4"].detail
    assert book.held_by("A") == [] and book.held_by("C") == []


def test_a_claim_refused_locally_gives_back_its_budget_slot_too() -> None:
    """R-SPAWN-7: a release of a spawn that never started (refused by the target's own checks
    after its claim was admitted) frees the live slot and the budget slot; a second release
    of it changes nothing."""
    book = JobBook()
    book.apply(claim("w0", "A", live=1, spawns=1))
    book.apply(Release(job="j1", spawn_id="w0", host="A", launched=False))
    book.apply(Release(job="j1", spawn_id="w0", host="A", launched=False))
    book.apply(claim("w1", "B", live=1, spawns=1))
    book.apply(claim("w2", "B", live=1, spawns=1))
    assert book.verdicts["w1"].admitted and not book.verdicts["w2"].admitted


def test_a_claim_signed_by_another_host_or_altered_is_skipped() -> None:
    """R-SPAWN-7: a record decodes only when its signature verifies under a trusted key of the
    host it names, so one host cannot take or free another's slots."""
    a, b = Signer.generate("A"), Signer.generate("B")
    trust = TrustStore()
    for s in (a, b):
        trust.add(s.host, s.key_id, s.public_key_bytes)
    value, headers = encode(claim("w0", "A"), a)
    assert decode(value, headers, trust) == claim("w0", "A")
    forged, forged_headers = encode(claim("w0", "A"), b)  # B signs a claim naming A
    assert decode(forged, forged_headers, trust) is None
    assert decode(value.replace(b'"max_live": 2', b'"max_live": 9'), headers, trust) is None
    release, release_headers = encode(Release(job="j1", spawn_id="w0", host="A"), a)
    assert decode(release, release_headers, trust) == Release(job="j1", spawn_id="w0", host="A")


class _Log:
    """One partition in memory: what a producer appends, a consumer reads back in order."""

    def __init__(self, *, down: bool = False) -> None:
        self.records: list[tuple[bytes, list[tuple[str, bytes]]]] = []
        self.down = down


class _Msg:
    def __init__(self, offset: int, value: bytes, headers: Any) -> None:
        self._offset, self._value, self._headers = offset, value, headers

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def headers(self) -> Any:
        return self._headers


class _Producer:
    def __init__(self, log: _Log) -> None:
        self.log = log
        self.pending: list[Any] = []

    def produce(
        self, topic: str, *, key: bytes, value: bytes, headers: Any, on_delivery: Any
    ) -> None:
        self.pending.append((value, headers, on_delivery))

    def poll(self, timeout: float) -> None:
        if self.log.down:
            return  # no delivery report while the broker is away
        for value, headers, on_delivery in self.pending:
            self.log.records.append((value, headers))
            on_delivery(None, _Msg(len(self.log.records) - 1, value, headers))
        self.pending = []


class _Consumer:
    def __init__(self, log: _Log) -> None:
        self.log, self.at = log, 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        return type("M", (), {"topics": {topic: type("T", (), {"partitions": {0: None}})()}})()

    def assign(self, parts: Any) -> None:
        self.at = 0

    def assignment(self) -> list[Any]:
        return [type("TP", (), {"partition": 0})()]

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, len(self.log.records)

    def consume(self, num_messages: int, timeout: float) -> list[_Msg]:
        out = [_Msg(i, v, h) for i, (v, h) in enumerate(self.log.records) if i >= self.at]
        self.at = len(self.log.records)
        return out


def _ledgers(log: _Log, *hosts: str) -> list[JobLedger]:
    signers = [Signer.generate(h) for h in hosts]
    trust = TrustStore()
    for s in signers:
        trust.add(s.host, s.key_id, s.public_key_bytes)
    return [
        JobLedger(
            host=s.host,
            topic="fleet.jobs",
            signer=s,
            trust=trust,
            producer=lambda: _Producer(log),
            consumer=lambda: _Consumer(log),
            wait_s=0.5,
        )
        for s in signers
    ]


def test_two_gateways_claiming_the_last_slot_one_wins_and_a_release_reopens_it() -> None:
    """R-SPAWN-7: two hosts' ledgers over one log: the cap is held across both; a worker that
    ended on its host is released by that host's reconcile, and only then is a slot free."""
    log = _Log()
    a, b = _ledgers(log, "A", "B")
    assert a.claim(claim("w0", "A", live=1)).admitted
    assert not b.claim(claim("w1", "B", live=1)).admitted
    assert b.reconcile(lambda held: {c.spawn_id: True for c in held}) == 0  # B holds nothing
    assert a.reconcile(lambda held: {}) == 0  # w0 still running
    assert not b.claim(claim("w2", "B", live=1)).admitted
    assert a.reconcile(lambda held: {c.spawn_id: True for c in held}) == 1  # w0 ended
    assert b.claim(claim("w3", "B", live=1)).admitted


def test_while_the_broker_is_away_a_claim_is_refused_retriable_and_released_later() -> None:
    """R-SPAWN-7: no delivery report within the wait: LedgerUnavailable (nothing started); the
    claim, appended once the broker is back, is read back and released by reconcile."""
    log = _Log(down=True)
    (a,) = _ledgers(log, "A")
    with pytest.raises(LedgerUnavailable):
        a.claim(claim("w0", "A", live=1))
    log.down = False
    a._producer.poll(0)  # the broker is back: the queued claim lands
    assert a.reconcile(lambda held: {c.spawn_id: True for c in held}) == 1
    assert a.claim(claim("w1", "A", live=1)).admitted


def test_a_claim_made_while_reconcile_reads_the_store_does_not_wait_for_it() -> None:
    """R-SPAWN-7: reconcile reads the store (which workers ended) without the ledger's lock. A
    SPAWN claims inside its batch's transaction, holding SQLite's write lock: were the ledger's
    lock held while reconcile waits for the store, the two would deadlock until the store's busy
    timeout and the claim be refused LEDGER_UNAVAILABLE."""
    import threading

    log = _Log()
    (a,) = _ledgers(log, "A")
    assert a.claim(claim("w0", "A", live=5)).admitted
    verdicts: list[bool] = []

    def ended(held: list[Claim]) -> dict[str, bool]:
        # a batch's SPAWN arrives while the store is read: its claim must not wait for us
        t = threading.Thread(target=lambda: verdicts.append(a.claim(claim("w1", "A")).admitted))
        t.start()
        t.join(5)
        assert not t.is_alive(), "the claim waited for reconcile's read of the store"
        return {c.spawn_id: True for c in held}

    assert a.reconcile(ended) == 1  # w0 released
    assert verdicts == [True]
