"""The history: one JSON object per line, one line per operation (``docs/chaos.md``).

Operations (``op``):

* ``send`` - a send the sender's gateway acknowledged locally (queued in its outbox):
  ``msgId``, ``from``, ``to``, ``kind``, ``seq`` (0, 1, 2 ... per ``from -> to`` stream), ``path``
  (``pull``: held for a main; ``inject``: injected into a worker).
* ``held`` - the recipient's gateway holds it (``drained`` when a poll took it).
* ``injected`` - the worker's injector ran for it (one line per run, in run order).
* ``dead_letter`` - a gateway dead-lettered it (``reason``).
* ``failed`` - a FAILED receipt for it reached the sender (``reason``).
* ``rejected`` - the sender's outbox refused it for good (``reason``).
* ``late_injected`` - the sender's gateway recorded an INJECTED that came after its FAILED (the
  forward path's residual window, logged and counted there; ``docs/gateway.md``).
* ``inject_uncertain`` - the sender's gateway recorded an INJECTED with stage ``uncertain``: the
  recipient's gateway died between deciding to inject it and recording it (its inject journal
  row was open at its restart), so it may or may not have been injected (``docs/gateway.md``).
* ``unshipped`` - still in the sender's outbox at the end (not seen yet, not lost).
* ``no_waiter`` / ``too_late`` - the conversation refusals (R-CONV-2), held for the asker
  (an ASK nobody listened for) or the answerer (an ANSWER after its turn ended): ``turnId``,
  ``reason``; the checker resolves the turn to the ASK or the ANSWER it refuses.
* ``broadcast`` - a broadcast the sender's gateway acknowledged locally: ``msgId``, ``group``,
  ``hosts`` (how many hosts it was staged for), ``members`` (host -> the group's gids there).
* ``staged`` - a broadcast's outbox row for one host (``msgId``, ``host``), read from the
  sender's store: which hosts it was sent to.
* ``run_step`` - a run journal's step (or completion) committed with its outbox row:
  ``branchKey``, ``lsn``, ``runId``, ``step``.
* ``run_applied`` - the consumer's fold applied ``(branchKey, lsn)`` (one row per apply, in
  apply order); ``run_unshipped`` / ``run_rejected`` - a run's row still pending or refused for
  good in its outbox; ``run_transport`` - the records read from the run topic, copies included.
* ``fault`` / ``heal`` / ``recovered`` - the nemesis's account (``name``, ``seconds``).
* ``bad`` - a bad record the broker confirmed in B's inbox (``msgId``, ``variant``: garbage,
  forged, stranger): it must end dead-lettered (or refused) with a reason, never held.
* ``cpu`` - a gateway's CPU seconds over the quiet window (``name``, ``cpu_s``, ``wall_s``).
* ``exited`` - a gateway not running when the history was collected (``name``, ``exit_code``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any


class Op(StrEnum):
    SEND = "send"
    HELD = "held"
    INJECTED = "injected"
    DEAD_LETTER = "dead_letter"
    FAILED = "failed"
    REJECTED = "rejected"
    UNSHIPPED = "unshipped"
    LATE_INJECTED = "late_injected"
    INJECT_UNCERTAIN = "inject_uncertain"
    NO_WAITER = "no_waiter"
    TOO_LATE = "too_late"
    BROADCAST = "broadcast"
    STAGED = "staged"
    RUN_STEP = "run_step"
    RUN_APPLIED = "run_applied"
    RUN_UNSHIPPED = "run_unshipped"
    RUN_REJECTED = "run_rejected"
    RUN_TRANSPORT = "run_transport"
    FAULT = "fault"
    HEAL = "heal"
    RECOVERED = "recovered"
    BAD = "bad"
    CPU = "cpu"
    EXITED = "exited"


class DeliveryPath(StrEnum):
    """Which delivery path a send takes (R-ACK-3 forward/inject, R-ACK-2 reply/pull)."""

    PULL = "pull"
    INJECT = "inject"


def row(op: Op, **fields: Any) -> dict[str, Any]:
    """One history row: ``op`` first, then the fields, with a wall-clock ``t`` (seconds)."""
    return {"op": str(op), "t": round(time.time(), 3), **fields}


class HistoryWriter:
    """Append-only JSONL, flushed per line so a crash of the driver keeps what it saw.
    Thread-safe: the workload thread and the nemesis write to one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")

    def write(self, op: Op, **fields: Any) -> dict[str, Any]:
        entry = row(op, **fields)
        line = json.dumps(entry, separators=(",", ":"), sort_keys=False)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
        return entry

    def extend(self, entries: Iterable[Mapping[str, Any]]) -> None:
        with self._lock:
            for e in entries:
                self._file.write(json.dumps(dict(e), separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a history file, in order (a torn last line from a crash is skipped)."""
    with path.open(encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
