"""The worker-pool checker: a pure function from a pool history to a verdict (``docs/chaos.md``).

Rules, for every submitted event (a ``send`` the broker confirmed; R-POOL-3, R-ACK-8,
R-POOL-1, R-FAIL-1, R-FAIL-2, R-FAIL-3):

* nothing lost - it is applied (an effect row), or parked behind its quarantined key, or
  dead-lettered with a reason;
* nothing twice - at most one effect row per event id; never both applied and parked or
  dead-lettered; parked and dead-lettered at most once;
* one partition, one member at a time - two effect rows of one partition on two members whose
  step intervals overlap are a finding (``CHAOS_POOL_OVERLAP``), and so are two overlapping steps
  of one key (its lane runs one step at a time, in either concurrency mode);
* per-key order - a key's effect rows, in step order, come in submit order;
* every dead letter and quarantine carries a reason code;
* static membership (``static``): a partition is applied by one instance for the whole run
  (``CHAOS_POOL_REASSIGNED``: a restart inside the session moved it), and while a member is
  down the others' partitions keep flowing (``CHAOS_POOL_STALLED``);
* poison (``poison``): the poison event is retried (at least ``min_attempts`` failed attempts,
  consecutive ones on a member at least ``min_backoff_s`` apart: ``CHAOS_POOL_NOT_RETRIED``) and
  no more than ``max_attempts`` in all, whoever owned it (the retry limit of R-FAIL-3
  and the stall bound of docs/failures.md: ``CHAOS_POOL_RETRY_BUDGET``),
  then its key is quarantined with a reason (``CHAOS_POOL_NOT_QUARANTINED``); no later record of
  that key is applied (they are parked, in order: ``CHAOS_OUT_OF_ORDER``); other keys are applied
  while it is retried (``CHAOS_POOL_STALLED``).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .checker import Finding, Verdict, Violation
from .history import Op
from .pool_workload import PoolOp

Row = Mapping[str, Any]


class PoolViolation(StrEnum):
    """The pool checker's own finding codes (beside :class:`~.checker.Violation`'s)."""

    OVERLAP = "CHAOS_POOL_OVERLAP"
    REASSIGNED = "CHAOS_POOL_REASSIGNED"
    STALLED = "CHAOS_POOL_STALLED"
    NOT_RETRIED = "CHAOS_POOL_NOT_RETRIED"
    NOT_QUARANTINED = "CHAOS_POOL_NOT_QUARANTINED"
    RETRY_BUDGET = "CHAOS_POOL_RETRY_BUDGET"


@dataclass(frozen=True, kw_only=True)
class PoolRules:
    static: bool = False
    poison: bool = False
    min_attempts: int = 2  # failed attempts before the quarantine (the retry budget)
    # at most this many in all (None: unbounded): the budget, plus one attempt whose failure a
    # kill -9 may have cut off before it was counted
    max_attempts: int | None = None
    min_backoff_s: float = 0.25  # between consecutive attempts on one member
    stall_window_s: float = 1.0  # a fault window shorter than this is not judged for stalls


def instance(member: str) -> str:
    """``m1.2`` -> ``m1`` (the workload names each incarnation ``<instance>.<n>``)."""
    return member.rsplit(".", 1)[0]


@dataclass(kw_only=True)
class _Index:
    sends: dict[str, Row] = field(default_factory=dict)
    applied: dict[str, list[Row]] = field(default_factory=lambda: defaultdict(list))
    parked: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)
    quarantined: dict[str, Row] = field(default_factory=dict)
    attempts: dict[str, list[Row]] = field(default_factory=lambda: defaultdict(list))
    parked_rows: list[Row] = field(default_factory=list)
    faults: list[Row] = field(default_factory=list)
    heals: list[Row] = field(default_factory=list)
    refused: int = 0
    recoveries: list[float] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def add(self, code: StrEnum, msg_id: str, detail: str = "") -> None:
        self.findings.append(Finding(code=code, msg_id=msg_id, detail=detail))

    @classmethod
    def of(cls, rows: list[Row]) -> _Index:
        ix = cls()
        for r in rows:
            op, mid = r.get("op"), str(r.get("msgId", ""))
            if op in (Op.DEAD_LETTER, PoolOp.QUARANTINED) and not r.get("reason"):
                ix.add(Violation.NO_REASON, mid or str(r.get("key")), str(op))
            if op == Op.SEND:
                ix.sends[mid] = r
            elif op == PoolOp.APPLIED:
                ix.applied[mid].append(r)
            elif op == PoolOp.PARKED:
                ix.parked[mid] += 1
                ix.parked_rows.append(r)
            elif op == Op.DEAD_LETTER:
                ix.dead[mid] += 1
            elif op == PoolOp.QUARANTINED:
                ix.quarantined[str(r["key"])] = r
            elif op == PoolOp.ATTEMPT:
                ix.attempts[mid].append(r)
            elif op == Op.REJECTED and r.get("local"):
                ix.refused += 1
            elif op == Op.FAULT:
                ix.faults.append(r)
            elif op == Op.HEAL and "target" in r:  # the nemesis's own heal, not a restart
                ix.heals.append(r)
            elif op == Op.RECOVERED and r.get("seconds") is not None:
                ix.recoveries.append(float(r["seconds"]))
        for mid in ix.applied:
            if mid not in ix.sends:
                ix.add(Violation.UNKNOWN_MSG, mid, "applied")
        return ix


def _outcomes(ix: _Index) -> tuple[int, int]:
    """Nothing lost, nothing twice; returns (lost, duplicated)."""
    lost = dup = 0
    for mid, s in ix.sends.items():
        a, p, d = len(ix.applied.get(mid, ())), ix.parked[mid], ix.dead[mid]
        if a > 1 or p > 1 or d > 1 or (a and (p or d)):
            dup += 1
            ix.add(Violation.DUPLICATED, mid, f"applied {a}, parked {p}, dead-lettered {d}")
        elif not (a or p or d):
            lost += 1
            ix.add(Violation.LOST, mid, f"{s.get('key')} seq {s.get('seq')}")
    return lost, dup


def _overlaps(ix: _Index) -> None:
    """No partition's steps on two members at once; no key's steps at once."""
    rows = [r for rs in ix.applied.values() for r in rs]
    by_part: dict[int, list[Row]] = defaultdict(list)
    by_key: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_part[int(r["partition"])].append(r)
        by_key[str(r.get("key"))].append(r)
    for part, steps in by_part.items():
        steps.sort(key=lambda r: (r["started_ms"], r["id"]))
        ends: dict[str, int] = {}  # member -> latest end so far
        for r in steps:
            for member, end in ends.items():
                if member != r["member"] and end > r["started_ms"]:
                    ix.add(
                        PoolViolation.OVERLAP, str(r["msgId"]),
                        f"partition {part}: {r['member']} started at {r['started_ms']}, "
                        f"{member} ran until {end}",
                    )  # fmt: skip
            ends[str(r["member"])] = max(ends.get(str(r["member"]), 0), int(r["ended_ms"]))
    for key, steps in by_key.items():
        steps.sort(key=lambda r: (r["started_ms"], r["id"]))
        for prev, nxt in itertools.pairwise(steps):
            if prev["ended_ms"] > nxt["started_ms"]:
                ix.add(PoolViolation.OVERLAP, str(nxt["msgId"]),
                       f"key {key}: {nxt['member']} started before {prev['member']} ended")  # fmt: skip


def _order(ix: _Index) -> int:
    """Per key, effect rows (in step order) in submit order."""
    bad = 0
    by_key: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)
    for mid, rs in ix.applied.items():
        s = ix.sends.get(mid)
        if s is None:
            continue
        first = min(rs, key=lambda r: (r["started_ms"], r["id"]))
        by_key[str(s["key"])].append((first["started_ms"], first["id"], int(s["seq"]), mid))
    for key, steps in by_key.items():
        high = -1
        for _, _, seq, mid in sorted(steps):
            if seq < high:
                bad += 1
                ix.add(Violation.OUT_OF_ORDER, mid, f"key {key}: seq {seq} after {high}")
            high = max(high, seq)
    return bad


def _static(ix: _Index, rules: PoolRules) -> None:
    """One instance per partition for the whole run; the others flow while one is down."""
    owners: dict[int, set[str]] = defaultdict(set)
    rows = [r for rs in ix.applied.values() for r in rs]
    for r in rows:
        owners[int(r["partition"])].add(instance(str(r["member"])))
    late = {str(h.get("target")) for h in ix.heals if h.get("inside_session") is False}
    for part, who in sorted(owners.items()):
        if len(who) > 1 and not who & late:  # a member back after its session: moves expected
            ix.add(PoolViolation.REASSIGNED, f"partition {part}", f"applied by {sorted(who)}")
    for fault, heal in zip(ix.faults, ix.heals, strict=False):
        target = str(heal.get("target", ""))
        # sent to the others while the member was down, applied by them by the heal + a window
        lo, hi = float(fault["t"]), float(heal["t"]) + rules.stall_window_s
        theirs = {p for p, who in owners.items() if target not in who}
        due = any(
            int(s.get("partition", -1)) in theirs and lo <= float(s["t"]) <= float(heal["t"])
            for s in ix.sends.values()
        )
        flowed = any(
            instance(str(r["member"])) != target and lo * 1000 <= r["ended_ms"] <= hi * 1000
            for r in rows
        )
        if due and not flowed:
            ix.add(PoolViolation.STALLED, f"fault at {lo}",
                   f"no other member applied anything while {target} was down")  # fmt: skip


def _poison(ix: _Index, rules: PoolRules) -> int:
    """Retried with backoff, then quarantined; nothing of its key applied past it; others go."""
    bad = 0
    rows = [r for rs in ix.applied.values() for r in rs]
    for mid, s in ix.sends.items():
        if not s.get("poison"):
            continue
        key, seq = str(s["key"]), int(s["seq"])
        tries = sorted(ix.attempts.get(mid, []), key=lambda r: r["started_ms"])
        if len(tries) < rules.min_attempts:
            ix.add(PoolViolation.NOT_RETRIED, mid, f"{len(tries)} failed attempts")
        if rules.max_attempts is not None and len(tries) > rules.max_attempts:
            per = Counter(str(r["member"]) for r in tries)
            ix.add(PoolViolation.RETRY_BUDGET, mid,
                   f"{len(tries)} failed attempts (limit {rules.max_attempts}): {dict(per)}")  # fmt: skip
        for member, mine in itertools.groupby(
            sorted(tries, key=lambda r: (r["member"], r["started_ms"])), key=lambda r: r["member"]
        ):
            for prev, nxt in itertools.pairwise(list(mine)):
                if nxt["started_ms"] - prev["ended_ms"] < rules.min_backoff_s * 1000:
                    ix.add(PoolViolation.NOT_RETRIED, mid, f"{member}: attempts without backoff")
        q = ix.quarantined.get(key)
        if q is None:
            ix.add(PoolViolation.NOT_QUARANTINED, mid, f"key {key}")
        for later in (r for r in rows if r.get("key") == key):
            ls = ix.sends.get(str(later["msgId"]))
            if ls is not None and int(ls["seq"]) > seq:
                bad += 1
                ix.add(Violation.OUT_OF_ORDER, str(later["msgId"]),
                       f"key {key}: seq {ls['seq']} applied past its poison seq {seq}")  # fmt: skip
        parked = [int(ix.sends[str(p["msgId"])]["seq"]) for p in ix.parked_rows
                  if p.get("key") == key and str(p["msgId"]) in ix.sends]  # fmt: skip
        if parked != sorted(parked):
            bad += 1
            ix.add(Violation.OUT_OF_ORDER, mid, f"key {key}: parked as {parked}")
        if tries and q is not None:
            lo, hi = int(tries[0]["started_ms"]), int(q["t_ms"])
            if hi - lo >= rules.stall_window_s * 1000 and not any(
                r.get("key") != key and lo <= r["ended_ms"] <= hi for r in rows
            ):
                ix.add(PoolViolation.STALLED, mid, f"no other key applied in {hi - lo} ms")
    return bad


def check(history: Iterable[Row], rules: PoolRules = PoolRules()) -> Verdict:
    """Apply every pool rule (the module docstring) to ``history``."""
    rows = list(history)
    ix = _Index.of(rows)
    lost, dup = _outcomes(ix)
    _overlaps(ix)
    out_of_order = _order(ix)
    if rules.static:
        _static(ix, rules)
    if rules.poison:
        out_of_order += _poison(ix, rules)
    return Verdict(
        operations=len(rows),
        sends=len(ix.sends),
        faults=len(ix.faults),
        lost=lost,
        duplicated=dup,
        out_of_order=out_of_order,
        unseen=0,
        refused=ix.refused,
        slowest_recovery_s=max(ix.recoveries, default=None),
        findings=tuple(ix.findings),
    )
