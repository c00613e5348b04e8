"""The checker: a pure function from a history to a verdict (``docs/chaos.md`` lists the rules).

Rules, for every acknowledged ``send`` (seed 000 §5-§6, seed 001 'at-least-once, effectively
once'):

* nothing lost - it ends held or injected exactly once, or dead-lettered with a reason, or
  answered by exactly one FAILED (the forward path's INJECT_TIMEOUT; on the reply path the DLQ
  reporter's FAILED about a dead letter). A send still in the sender's outbox
  (``unshipped``) is *unseen*, reported apart: it is not lost yet, only not delivered.
* nothing twice - at most one hold and one inject per msgId; at most one FAILED; never both an
  inject and a FAILED for one brief (a FAILED tells the sender it did not happen) -- unless the
  sender's gateway recorded the INJECTED as arriving after its FAILED (``late_injected``): the
  forward path's residual window, said loudly there, counted in its own column ``late``.
* uncertain - a brief the sender's gateway recorded as ``uncertain`` (``inject_uncertain``: the
  recipient died between deciding to inject it and recording it) is an outcome, counted in its
  own column ``uncertain``: injected at most once, at most one FAILED (an INJECT_TIMEOUT that
  came before the report), never lost and never a gap; it is never uncertain under a strict
  (orderly) fault.
* order - per ``from -> to`` stream, holds (and injects) come in send order, without gaps: a send
  skipped while a later one on its stream was delivered is a gap, unless it was dead-lettered,
  rejected or FAILED (an outcome that says why).
* every rejection (dead letter, FAILED, outbox refusal) carries a reason code.
* strict (orderly faults only, e.g. a clean restart): no FAILED, dead letter or refusal at all.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .history import Op


class Violation(StrEnum):
    """Stable codes of the checker's findings (one family; folded into the registry later)."""

    LOST = "CHAOS_LOST"
    DUPLICATED = "CHAOS_DUPLICATED"
    OUT_OF_ORDER = "CHAOS_OUT_OF_ORDER"
    GAP = "CHAOS_GAP"
    CONFLICT = "CHAOS_INJECTED_AND_FAILED"
    NO_REASON = "CHAOS_NO_REASON"
    UNKNOWN_MSG = "CHAOS_UNKNOWN_MSG"
    NOT_CLEAN = "CHAOS_FAILED_UNDER_CLEAN_FAULT"


@dataclass(frozen=True, kw_only=True)
class Finding:
    code: Violation
    msg_id: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    operations: int
    sends: int
    faults: int
    lost: int
    duplicated: int
    out_of_order: int
    unseen: int
    refused: int = 0  # sends the client refused locally (never acknowledged, not checked)
    late: int = 0  # briefs injected AND FAILED whose sender recorded the INJECTED as late
    uncertain: int = 0  # briefs reported "may have been injected" (the inject journal)
    slowest_recovery_s: float | None
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.findings

    def count(self, code: Violation) -> int:
        return sum(f.code == code for f in self.findings)


_OUTCOMES = (Op.HELD, Op.INJECTED, Op.DEAD_LETTER, Op.FAILED, Op.REJECTED, Op.UNSHIPPED)
_EXPLAINED = (Op.DEAD_LETTER, Op.FAILED, Op.REJECTED)
Stream = tuple[str, str]


@dataclass(kw_only=True)
class _Index:
    """The history, indexed by msgId and by ``from -> to`` stream."""

    sends: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    seen: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    delivered: dict[Stream, list[str]] = field(default_factory=lambda: defaultdict(list))
    faults: int = 0
    refused: int = 0
    late_ids: set[str] = field(default_factory=set)
    uncertain_ids: set[str] = field(default_factory=set)
    recoveries: list[float] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @classmethod
    def of(cls, rows: list[Mapping[str, Any]]) -> _Index:
        ix = cls()
        for r in rows:
            if r.get("op") == Op.SEND:
                ix.sends[str(r["msgId"])] = r
            elif r.get("op") == Op.REJECTED and r.get("local"):
                ix.refused += 1
            elif r.get("op") == Op.LATE_INJECTED:
                ix.late_ids.add(str(r.get("msgId", "")))
            elif r.get("op") == Op.INJECT_UNCERTAIN:
                ix.uncertain_ids.add(str(r.get("msgId", "")))
            elif r.get("op") == Op.FAULT:
                ix.faults += 1
            elif r.get("op") == Op.RECOVERED and r.get("seconds") is not None:
                ix.recoveries.append(float(r["seconds"]))
        for r in rows:
            op, mid = r.get("op"), str(r.get("msgId", ""))
            if op not in _OUTCOMES:
                continue
            if op in _EXPLAINED and not r.get("reason"):
                ix.findings.append(Finding(code=Violation.NO_REASON, msg_id=mid, detail=str(op)))
            if mid not in ix.sends:
                if op in (Op.HELD, Op.INJECTED):  # delivered, yet never acknowledged as sent
                    ix.findings.append(
                        Finding(code=Violation.UNKNOWN_MSG, msg_id=mid, detail=str(op))
                    )
                continue
            ix.seen[mid][str(op)] += 1
            if op in (Op.HELD, Op.INJECTED):
                ix.delivered[_stream(ix.sends[mid])].append(mid)
        return ix


def _stream(send: Mapping[str, Any]) -> Stream:
    return (str(send["from"]), str(send["to"]))


def _outcomes(ix: _Index, strict: bool) -> tuple[int, int, int, int]:
    """Nothing lost, nothing twice; returns (lost, unseen, late, uncertain)."""
    lost = unseen = late = uncertain = 0
    for mid, s in ix.sends.items():
        c = ix.seen.get(mid, Counter())
        delivered = c[Op.HELD] + c[Op.INJECTED]
        explained = c[Op.DEAD_LETTER] + c[Op.REJECTED]
        failed = c[Op.FAILED]
        if c[Op.HELD] > 1 or c[Op.INJECTED] > 1 or failed > 1:
            ix.findings.append(Finding(code=Violation.DUPLICATED, msg_id=mid, detail=repr(dict(c))))
        if mid in ix.uncertain_ids:  # "may have been injected": the one outcome that says so
            uncertain += 1
            if strict:
                ix.findings.append(
                    Finding(code=Violation.NOT_CLEAN, msg_id=mid, detail="uncertain")
                )
            continue
        if failed and c[Op.INJECTED]:
            if mid in ix.late_ids:  # the sender knows its FAILED was wrong: loud, counted
                late += 1
            else:
                ix.findings.append(Finding(code=Violation.CONFLICT, msg_id=mid))
        if strict and (failed or explained):
            ix.findings.append(Finding(code=Violation.NOT_CLEAN, msg_id=mid, detail=repr(dict(c))))
        if delivered or explained or failed:  # a FAILED (with its reason) is an outcome
            continue
        if c[Op.UNSHIPPED]:
            unseen += 1
            continue
        lost += 1
        ix.findings.append(Finding(code=Violation.LOST, msg_id=mid, detail=f"seq {s.get('seq')}"))
    return lost, unseen, late, uncertain


def _order(ix: _Index) -> int:
    """Per stream, deliveries in send order, and no unexplained gap before a delivery."""
    violations = 0
    by_stream: dict[Stream, list[Mapping[str, Any]]] = defaultdict(list)
    for s in ix.sends.values():
        by_stream[_stream(s)].append(s)
    for stream, order in ix.delivered.items():
        first = list(dict.fromkeys(order))  # the first delivery of each msgId
        seqs = [int(ix.sends[m]["seq"]) for m in first]
        high = -1
        for mid, cur in zip(first, seqs, strict=True):
            if cur < high:
                violations += 1
                ix.findings.append(
                    Finding(code=Violation.OUT_OF_ORDER, msg_id=mid, detail=f"{cur} after {high}")
                )
            high = max(high, cur)
        done = set(first)
        for s in by_stream[stream]:
            mid = str(s["msgId"])
            if int(s["seq"]) >= high or mid in done:
                continue
            if mid in ix.uncertain_ids:  # "may have been injected" is an outcome that says why
                continue
            if sum(ix.seen.get(mid, Counter())[o] for o in _EXPLAINED):
                continue
            violations += 1
            ix.findings.append(Finding(code=Violation.GAP, msg_id=mid, detail=f"seq {s['seq']}"))
    return violations


def check(history: Iterable[Mapping[str, Any]], *, strict: bool = False) -> Verdict:
    """Apply every rule to ``history`` (rows as written by :class:`~.history.HistoryWriter`).
    ``strict`` (an orderly fault such as a clean restart): any FAILED, dead letter or refusal
    of an acknowledged send is a finding too, reason or not."""
    rows = list(history)
    ix = _Index.of(rows)
    lost, unseen, late, uncertain = _outcomes(ix, strict)
    out_of_order = _order(ix)
    dup = sum(f.code in (Violation.DUPLICATED, Violation.CONFLICT) for f in ix.findings)
    return Verdict(
        operations=len(rows),
        sends=len(ix.sends),
        faults=ix.faults,
        lost=lost,
        duplicated=dup,
        out_of_order=out_of_order,
        unseen=unseen,
        refused=ix.refused,
        late=late,
        uncertain=uncertain,
        slowest_recovery_s=max(ix.recoveries, default=None),
        findings=tuple(ix.findings),
    )
