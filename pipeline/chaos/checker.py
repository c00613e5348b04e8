"""The checker: a pure function from a history to a verdict (``docs/chaos.md`` lists the rules).

Rules, for every acknowledged ``send`` (R-ACK-2, R-ACK-3, R-ACK-8):

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
* every rejection (dead letter, FAILED, outbox refusal, NO_WAITER, TOO_LATE) carries a reason.
* strict (orderly faults only, e.g. a clean restart): no FAILED, dead letter or refusal at all,
  not even a local one (``CHAOS_REFUSED_UNDER_CLEAN_FAULT``: a stopped host is away, not gone).

And for the rest of the mix:

* conversations (R-CONV-3) - every acknowledged ASK ends exactly once: one ANSWER held for
  the asker, or one NO_WAITER, or one FAILED (the turn's expiry) -- or, with none of these, an
  ANSWER the asker's gateway dead-lettered ``EXPIRED`` (held undrained past its ``expiresAt``,
  then swept); none is ``CHAOS_UNANSWERED``
  (unless the ASK or its ANSWER is still in an outbox), two are ``CHAOS_DUPLICATED``. The ASK
  and its ANSWER are sends like any other (held once, in order per stream); an ANSWER refused
  TOO_LATE (its turn had ended) is explained.
* broadcasts (R-TOP-6) - each member of the group on each host the broadcast was staged
  for (the hosts live in the sender's roster at the time) holds it exactly once, or the
  broadcast was dead-lettered / refused with a reason; twice is ``CHAOS_DUPLICATED``, never
  ``CHAOS_LOST``.
* runs (R-OUT-5) - per ``BranchKey`` the consumer's fold applies lsn 1, 2, 3 ... in that order,
  each once (else ``CHAOS_RUN_ORDER`` / ``CHAOS_DUPLICATED``), and every committed step is
  applied, or still in its outbox (unseen), or refused with a reason (else ``CHAOS_LOST``).

And for the processes (R-ENV-4: no process hot-loops or dies on a bad record):

* a bad record (garbage, forged, a stranger's) is never held or injected
  (``CHAOS_BAD_ACCEPTED``) and ends dead-lettered or refused with a reason
  (``CHAOS_BAD_UNREJECTED``, counted in ``lost``: it vanished without a word);
* no gateway uses more than :data:`HOT_LOOP_SHARE` of a core over the quiet window, when the
  fleet has nothing left to do (``CHAOS_HOT_LOOP``), and every gateway is running when the
  history is collected (``CHAOS_DIED``: the heal restarts a gateway a fault took down).
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
    UNANSWERED = "CHAOS_UNANSWERED"
    RUN_ORDER = "CHAOS_RUN_ORDER"
    BAD_ACCEPTED = "CHAOS_BAD_ACCEPTED"
    BAD_UNREJECTED = "CHAOS_BAD_UNREJECTED"
    HOT_LOOP = "CHAOS_HOT_LOOP"
    DIED = "CHAOS_DIED"
    REFUSED = "CHAOS_REFUSED_UNDER_CLEAN_FAULT"


# a gateway with nothing to do (the quiet window) idles on timers: a few percent of a core
HOT_LOOP_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class Finding:
    code: StrEnum  # a Violation, or a workload's own (pipeline/chaos/pool_checker.py)
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
    asks: int = 0  # acknowledged ASKs (conversations)
    broadcasts: int = 0
    run_steps: int = 0
    bad: int = 0  # bad records the broker confirmed in an inbox

    @property
    def ok(self) -> bool:
        return not self.findings

    def count(self, code: StrEnum) -> int:
        return sum(f.code == code for f in self.findings)


# the rows the driver writes for an operation the fleet acknowledged (what the drain waits on)
ACKED = frozenset({Op.SEND, Op.BROADCAST, Op.RUN_STEP})
_OUTCOMES = (
    Op.HELD, Op.INJECTED, Op.DEAD_LETTER, Op.FAILED, Op.REJECTED, Op.UNSHIPPED, Op.NO_WAITER,
    Op.TOO_LATE,
)  # fmt: skip
_EXPLAINED = (Op.DEAD_LETTER, Op.FAILED, Op.REJECTED, Op.NO_WAITER, Op.TOO_LATE)
_DELIVERED = (Op.HELD, Op.INJECTED)
Stream = tuple[str, str]
RunPos = tuple[str, int]  # (BranchKey, Lsn)


@dataclass(kw_only=True)
class _Runs:
    steps: dict[RunPos, Mapping[str, Any]] = field(default_factory=dict)
    applied: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    unshipped: set[RunPos] = field(default_factory=set)
    rejected: set[RunPos] = field(default_factory=set)

    def add(self, r: Mapping[str, Any]) -> None:
        op, pos = r.get("op"), (str(r.get("branchKey", "")), int(r.get("lsn", 0)))
        if op == Op.RUN_STEP:
            self.steps[pos] = r
        elif op == Op.RUN_APPLIED:
            self.applied[pos[0]].append(pos[1])
        elif op == Op.RUN_UNSHIPPED:
            self.unshipped.add(pos)
        elif op == Op.RUN_REJECTED:
            self.rejected.add(pos)


@dataclass(kw_only=True)
class _Index:
    """The history, indexed by msgId, by ``from -> to`` stream, by turn, by broadcast and by
    ``(BranchKey, Lsn)``."""

    sends: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    seen: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    delivered: dict[Stream, list[str]] = field(default_factory=lambda: defaultdict(list))
    asks: dict[str, str] = field(default_factory=dict)  # turnId -> the ASK's msgId
    answers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    broadcasts: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    staged: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    bseen: dict[str, Counter[tuple[str, str]]] = field(default_factory=lambda: defaultdict(Counter))
    runs: _Runs = field(default_factory=_Runs)
    faults: int = 0
    refusals: list[Mapping[str, Any]] = field(default_factory=list)  # local ``rejected`` rows
    late_ids: set[str] = field(default_factory=set)
    expired_ids: set[str] = field(default_factory=set)  # dead-lettered EXPIRED by a recipient
    uncertain_ids: set[str] = field(default_factory=set)
    recoveries: list[float] = field(default_factory=list)
    bad: dict[str, Counter[str]] = field(default_factory=dict)  # msgId -> its outcome rows
    procs: list[Mapping[str, Any]] = field(default_factory=list)  # ``cpu`` and ``exited`` rows
    findings: list[Finding] = field(default_factory=list)

    def _acked(self, r: Mapping[str, Any]) -> None:
        op = r.get("op")
        if op == Op.SEND:
            mid = str(r["msgId"])
            self.sends[mid] = r
            if r.get("kind") == "ASK" and r.get("turnId"):
                self.asks[str(r["turnId"])] = mid
            elif r.get("kind") == "ANSWER" and r.get("turnId"):
                self.answers[str(r["turnId"])].append(mid)
        elif op == Op.BROADCAST:
            self.broadcasts[str(r["msgId"])] = r
        elif op == Op.STAGED:
            self.staged[str(r.get("msgId", ""))].add(str(r.get("host", "")))
        elif op == Op.REJECTED and r.get("local"):
            self.refusals.append(r)
        elif op == Op.LATE_INJECTED:
            self.late_ids.add(str(r.get("msgId", "")))
        elif op == Op.INJECT_UNCERTAIN:
            self.uncertain_ids.add(str(r.get("msgId", "")))
        elif op == Op.FAULT:
            self.faults += 1
        elif op == Op.RECOVERED and r.get("seconds") is not None:
            self.recoveries.append(float(r["seconds"]))
        elif op == Op.BAD:
            self.bad[str(r.get("msgId", ""))] = Counter()
        elif op in (Op.CPU, Op.EXITED):
            self.procs.append(r)
        else:
            self.runs.add(r)

    def _msg_id(self, r: Mapping[str, Any]) -> str:
        """The msgId an outcome row is about; a turn's refusal is about the ASK (NO_WAITER) or
        the ANSWER (TOO_LATE) of that turn."""
        op, turn = r.get("op"), str(r.get("turnId", ""))
        if op == Op.NO_WAITER:
            return self.asks.get(turn, "")
        if op == Op.TOO_LATE:
            return next(iter(self.answers.get(turn, [])), "")
        return str(r.get("msgId", ""))

    @classmethod
    def of(cls, rows: list[Mapping[str, Any]]) -> _Index:
        ix = cls()
        for r in rows:
            ix._acked(r)
        for r in rows:
            op = r.get("op")
            if op not in _OUTCOMES:
                continue
            mid = ix._msg_id(r)
            if op in _EXPLAINED and not r.get("reason"):
                ix.findings.append(Finding(code=Violation.NO_REASON, msg_id=mid, detail=str(op)))
            if mid in ix.broadcasts:
                ix.bseen[mid][(str(op), str(r.get("to", "")))] += 1
                continue
            if mid in ix.bad:
                ix.bad[mid][str(op)] += 1
                continue
            if mid not in ix.sends:
                if op in _DELIVERED:  # delivered, yet never acknowledged as sent
                    ix.findings.append(
                        Finding(code=Violation.UNKNOWN_MSG, msg_id=mid, detail=str(op))
                    )
                continue
            ix.seen[mid][str(op)] += 1
            if op == Op.DEAD_LETTER and r.get("reason") == "EXPIRED":
                ix.expired_ids.add(mid)
            if op in _DELIVERED:
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
        explained = c[Op.DEAD_LETTER] + c[Op.REJECTED] + c[Op.NO_WAITER] + c[Op.TOO_LATE]
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


def _conversations(ix: _Index) -> int:
    """Every acknowledged ASK ends exactly once: an ANSWER held for the asker, a NO_WAITER or
    a FAILED (its turn's expiry). Returns the ASKs with no end."""
    unanswered = 0
    for turn, ask in ix.asks.items():
        c = ix.seen.get(ask, Counter())
        answers = ix.answers.get(turn, [])
        held = [a for a in answers if ix.seen.get(a, Counter())[Op.HELD]]
        ends = len(held) + (c[Op.NO_WAITER] > 0) + (c[Op.FAILED] > 0)
        if ends > 1:
            ix.findings.append(
                Finding(code=Violation.DUPLICATED, msg_id=ask,
                        detail=f"conversation ended {ends} times: {len(held)} ANSWER, "
                        f"NO_WAITER {c[Op.NO_WAITER]}, FAILED {c[Op.FAILED]}")
            )  # fmt: skip
        elif ends == 0:
            waiting = c[Op.UNSHIPPED] + sum(
                ix.seen.get(a, Counter())[Op.UNSHIPPED] for a in answers
            )
            if waiting:  # the ASK or its ANSWER is still in an outbox: unseen, counted there
                continue
            if any(a in ix.expired_ids for a in answers):
                # the ANSWER reached the asker's gateway (the turn closed answered) and sat
                # undrained past its expiresAt: the sweeper dead-lettered it EXPIRED, with its
                # reason -- an end, loud (seen in #7 when a repetition outlived the ANSWER's ttl)
                continue
            unanswered += 1
            ix.findings.append(
                Finding(code=Violation.UNANSWERED, msg_id=ask,
                        detail=f"{len(answers)} ANSWER sent, none held; no NO_WAITER, no FAILED")
            )  # fmt: skip
    return unanswered


def _broadcasts(ix: _Index, strict: bool) -> tuple[int, int]:
    """Each member on each host a broadcast was staged for holds it exactly once, unless the
    broadcast was dead-lettered or refused with a reason. Returns (lost, unseen)."""
    lost = unseen = 0
    for mid, b in ix.broadcasts.items():
        c = ix.bseen.get(mid, Counter())
        staged = ix.staged.get(mid, set())
        explained = sum(n for (op, _to), n in c.items() if op in _EXPLAINED)
        unshipped = sum(n for (op, _to), n in c.items() if op == Op.UNSHIPPED)
        if strict and explained:
            ix.findings.append(Finding(code=Violation.NOT_CLEAN, msg_id=mid, detail="broadcast"))
        if len(staged) < int(b.get("hosts", 0)):
            lost += 1
            ix.findings.append(
                Finding(code=Violation.LOST, msg_id=mid,
                        detail=f"broadcast staged for {sorted(staged)}, acknowledged for "
                        f"{b.get('hosts')} hosts")
            )  # fmt: skip
        members: Mapping[str, list[str]] = b.get("members") or {}
        expected = {gid for host in staged for gid in members.get(host, [])}
        delivered: Counter[str] = Counter()
        for (op, to), n in c.items():
            if op in _DELIVERED:
                delivered[to] += n
        for gid in sorted(set(delivered) - expected):
            ix.findings.append(
                Finding(code=Violation.UNKNOWN_MSG, msg_id=mid, detail=f"broadcast to {gid}")
            )
        for gid in sorted(expected):
            if delivered[gid] > 1:
                ix.findings.append(
                    Finding(code=Violation.DUPLICATED, msg_id=mid,
                            detail=f"broadcast held {delivered[gid]} times by {gid}")
                )  # fmt: skip
            elif delivered[gid] == 0 and not explained:
                if unshipped:
                    unseen += 1
                    continue
                lost += 1
                ix.findings.append(
                    Finding(code=Violation.LOST, msg_id=mid, detail=f"broadcast to {gid}")
                )
    return lost, unseen


def _runs(ix: _Index, strict: bool) -> tuple[int, int, int]:
    """Per BranchKey: the fold applied lsn 1, 2, 3 ... in order, each once; every committed
    step applied, unshipped (unseen) or refused with a reason. Returns (lost, unseen, order)."""
    runs = ix.runs
    lost = unseen = order = 0
    applied: set[RunPos] = set()
    for branch, lsns in runs.applied.items():
        high = 0
        for lsn in lsns:
            where = f"{branch}#{lsn}"
            if (branch, lsn) in applied:
                ix.findings.append(
                    Finding(code=Violation.DUPLICATED, msg_id=where, detail="applied twice")
                )
            elif lsn != high + 1:
                order += 1
                ix.findings.append(
                    Finding(code=Violation.RUN_ORDER, msg_id=where, detail=f"applied after {high}")
                )
            applied.add((branch, lsn))
            high = max(high, lsn)
            if (branch, lsn) not in runs.steps:
                ix.findings.append(Finding(code=Violation.UNKNOWN_MSG, msg_id=where, detail="run"))
    for pos in sorted(runs.steps):
        where = f"{pos[0]}#{pos[1]}"
        if strict and pos in runs.rejected:
            ix.findings.append(Finding(code=Violation.NOT_CLEAN, msg_id=where, detail="run"))
        if pos in applied or pos in runs.rejected:
            continue
        if pos in runs.unshipped:
            unseen += 1
            continue
        lost += 1
        ix.findings.append(Finding(code=Violation.LOST, msg_id=where, detail="run step"))
    return lost, unseen, order


def _bad_and_procs(ix: _Index) -> int:
    """Bad records rejected with a reason and never delivered; no gateway hot-looping in the
    quiet window or gone at the end. Returns the bad records with no rejection (lost)."""
    unrejected = 0
    for mid, c in ix.bad.items():
        if c[Op.HELD] or c[Op.INJECTED]:
            ix.findings.append(
                Finding(code=Violation.BAD_ACCEPTED, msg_id=mid, detail=repr(dict(c)))
            )
        elif not sum(c[o] for o in _EXPLAINED):
            unrejected += 1
            ix.findings.append(Finding(code=Violation.BAD_UNREJECTED, msg_id=mid))
    for r in ix.procs:
        name = str(r.get("name", ""))
        if r.get("op") == Op.EXITED:
            ix.findings.append(
                Finding(code=Violation.DIED, msg_id=name, detail=f"exit code {r.get('exit_code')}")
            )
        elif float(r.get("cpu_s", 0)) > HOT_LOOP_SHARE * float(r.get("wall_s", 0) or 1):
            ix.findings.append(
                Finding(code=Violation.HOT_LOOP, msg_id=name,
                        detail=f"{r.get('cpu_s')} CPU s in {r.get('wall_s')} s of quiet")
            )  # fmt: skip
    return unrejected


def check(history: Iterable[Mapping[str, Any]], *, strict: bool = False) -> Verdict:
    """Apply every rule to ``history`` (rows as written by :class:`~.history.HistoryWriter`).
    ``strict`` (an orderly fault such as a clean restart): any FAILED, dead letter or refusal
    of an acknowledged send is a finding too, reason or not, and so is a local refusal."""
    rows = list(history)
    ix = _Index.of(rows)
    lost, unseen, late, uncertain = _outcomes(ix, strict)
    lost += _conversations(ix)
    b_lost, b_unseen = _broadcasts(ix, strict)
    r_lost, r_unseen, r_order = _runs(ix, strict)
    lost, unseen = lost + b_lost + r_lost + _bad_and_procs(ix), unseen + b_unseen + r_unseen
    out_of_order = _order(ix) + r_order
    for r in ix.refusals if strict else ():  # a restart is not a departure: none refused
        ix.findings.append(Finding(code=Violation.REFUSED, msg_id="", detail=str(r.get("reason"))))
    dup = sum(f.code in (Violation.DUPLICATED, Violation.CONFLICT) for f in ix.findings)
    return Verdict(
        operations=len(rows),
        sends=len(ix.sends),
        faults=ix.faults,
        lost=lost,
        duplicated=dup,
        out_of_order=out_of_order,
        unseen=unseen,
        refused=len(ix.refusals),
        late=late,
        uncertain=uncertain,
        slowest_recovery_s=max(ix.recoveries, default=None),
        findings=tuple(ix.findings),
        asks=len(ix.asks),
        broadcasts=len(ix.broadcasts),
        run_steps=len(ix.runs.steps),
        bad=len(ix.bad),
    )


def pending(history: Iterable[Mapping[str, Any]]) -> int:
    """Acknowledged operations with no outcome yet in ``history`` (lost or unseen as the checker
    would count them now): the drain waits for 0. Run steps are not counted (the run topic is
    read once, at the end)."""
    v = check(r for r in history if r.get("op") != Op.RUN_STEP)
    return v.lost + v.unseen
