"""The chaos workload's drain: it waits until the checker, over the history and a
fresh read of the stores, counts nothing acknowledged without an outcome.

Found by #18 retention-gap at 20 repetitions: the drain read only the acknowledged rows of the
history, so outcomes that exist only there -- the nemesis's REJECTED rows for sends retention
deleted (OFFSETS_LOST) -- were invisible to it, and every repetition waited out the 90 s bound
although the final check found everything explained."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.chaos import collect
from pipeline.chaos.history import HistoryWriter, Op
from pipeline.chaos.workload import Workload, WorkloadConfig


def drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, Any]]) -> bool:
    config = WorkloadConfig(
        bootstrap="127.0.0.1:1", root=tmp_path, quiet_s=0.0, drain_timeout_s=1.0
    )
    history = HistoryWriter(tmp_path / "h.jsonl")
    w = Workload(config, history)
    for r in rows:
        history.write(Op(r.pop("op")), **r)

    def nothing_in_the_stores() -> Iterator[dict[str, Any]]:
        return iter(())

    monkeypatch.setattr(w, "snapshot", nothing_in_the_stores)
    monkeypatch.setattr(collect, "pending_rows", lambda *_a, **_k: 0)
    try:
        return w.drain()
    finally:
        history.close()


def send(mid: str) -> dict[str, Any]:
    return {"op": "send", "msgId": mid, "from": "main-a", "to": "main-b", "kind": "REPLY",
            "seq": 0, "path": "pull"}  # fmt: skip


def test_an_outcome_only_the_history_holds_ends_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rejected = {"op": "rejected", "msgId": "m0", "reason": "OFFSETS_LOST", "by": "B",
                "source": "retention"}  # fmt: skip
    assert drained(tmp_path, monkeypatch, [send("m0"), rejected])


def test_a_send_with_no_outcome_anywhere_keeps_the_drain_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not drained(tmp_path, monkeypatch, [send("m0")])
