"""The consumer fold and the header codec: pure logic, no I/O."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from pipeline.errors import StoreError
from pipeline.outbox import Fold, Offer, fold_position
from pipeline.outbox.headers import fold_headers
from pipeline.record_headers import pack_headers, unpack_headers


def test_fold_applies_next_drops_redelivery_and_holds_after_a_gap() -> None:
    """R-OUT-5: exactly-once at the fold -- lsn == last+1 applies, lsn <= last is a no-op."""
    fold: Fold[str] = Fold()
    assert fold.offer("b", 1, "one") is Offer.APPLIED
    assert fold.offer("b", 1, "one again") is Offer.DUPLICATE
    assert fold.offer("b", 3, "three") is Offer.HELD
    assert fold.held("b") == 1 and fold.last("b") == 1
    assert fold.offer("b", 3, "three again") is Offer.DUPLICATE
    assert fold.offer("b", 2, "two") is Offer.APPLIED
    assert fold.last("b") == 3 and fold.held("b") == 0
    assert fold.state() == {"b": ["one", "two", "three"]}
    assert fold.duplicates == 2


def test_fold_of_any_redelivered_shuffle_equals_single_delivery() -> None:
    """R-OUT-5: redelivery (duplicates, reordering) folds to the single-delivery state."""
    single: Fold[int] = Fold()
    for branch in ("x", "y"):
        for lsn in range(1, 51):
            single.offer(branch, lsn, lsn * 10)
    rng = random.Random(7)
    for _ in range(20):
        stream = [(b, lsn) for b in ("x", "y") for lsn in range(1, 51)]
        stream += rng.sample(stream, 40)  # redeliveries
        # a relay resends a branch from its lowest unacked lsn: a gap is always refilled in order
        rng.shuffle(stream)
        stream += [(b, lsn) for b in ("x", "y") for lsn in range(1, 51)]
        fold: Fold[int] = Fold()
        for b, lsn in stream:
            fold.offer(b, lsn, lsn * 10)
        assert fold.state() == single.state()


def test_fold_resumes_from_persisted_positions() -> None:
    fold: Fold[str] = Fold(start={"b": 5})
    assert fold.offer("b", 5, "old") is Offer.DUPLICATE
    assert fold.offer("b", 6, "new") is Offer.APPLIED
    assert fold.positions() == {"b": 6}


def test_headers_round_trip_and_fold_position() -> None:
    headers = [("v", b"1"), ("sig", bytes(range(256))), ("empty", b"")]
    assert unpack_headers(pack_headers(headers)) == headers
    assert pack_headers(None) == b"" and unpack_headers(None) == unpack_headers(b"") == []
    record = headers + fold_headers("acme", "acme/r1/b2", 42)
    assert fold_position(record) == ("acme/r1/b2", 42)
    assert fold_position(headers) is None
    fold: Fold[str] = Fold()
    assert fold.offer_record(record, "x") is Offer.HELD  # lsn 42 after nothing: a gap
    assert fold.offer_record(headers, "y") is None


def test_corrupt_headers_blob_is_a_store_error() -> None:
    blob = pack_headers([("name", b"value")])
    for cut in (blob[:-2], blob[:3], blob[:1]):  # in the value, in the name, in a length
        with pytest.raises(StoreError) as info:
            unpack_headers(cut)
        assert info.value.reason == "OUTBOX_CORRUPT" and info.value.retriable is False


def test_execution_path_does_not_even_import_a_kafka_client() -> None:
    """R-OUT-2: no path from run execution to a broker exists by construction."""
    code = (
        "import sys, tempfile, os\n"
        "from pipeline.store import make_engine, session_factory\n"
        "from pipeline.runs import Executor, RunJournal\n"
        "d = tempfile.mkdtemp()\n"
        "e = make_engine(f'sqlite:///{d}/s.db')\n"
        "Executor(sessions=session_factory(e), journal=RunJournal(topic='t'))"
        ".run(tenant='t', run_id='r', steps=3)\n"
        "bad = sorted(m for m in sys.modules if m.startswith('confluent_kafka'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
