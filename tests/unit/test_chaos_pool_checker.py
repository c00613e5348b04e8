"""The worker-pool checker on hand-made histories: a clean one passes, and each rule fails on the
history that breaks it (catalogue numbers 5, 6, 17 in ``docs/chaos.md``)."""

from __future__ import annotations

from typing import Any

from pipeline.chaos.checker import Violation
from pipeline.chaos.pool_checker import PoolRules, PoolViolation, check, instance

T0 = 1_000_000.0  # seconds (history ``t``); effect rows are in ms


def send(mid: str, key: str, seq: int, part: int, t: float, poison: bool = False) -> dict[str, Any]:
    return {"op": "send", "t": t, "msgId": mid, "key": key, "seq": seq, "partition": part,
            "poison": poison}  # fmt: skip


def applied(mid: str, key: str, part: int, member: str, start_s: float, end_s: float,
            rid: int) -> dict[str, Any]:  # fmt: skip
    return {"op": "applied", "msgId": mid, "id": rid, "partition": part, "offset": rid,
            "key": key, "member": member, "started_ms": int(start_s * 1000),
            "ended_ms": int(end_s * 1000), "reused": False}  # fmt: skip


def clean() -> list[dict[str, Any]]:
    """Keys a (partition 0, member m0) and b (partition 1, m1), three events each."""
    rows: list[dict[str, Any]] = []
    for i in range(3):
        rows += [send(f"a{i}", "a", i, 0, T0 + i), send(f"b{i}", "b", i, 1, T0 + i + 0.1)]
    for i in range(3):
        rows.append(applied(f"a{i}", "a", 0, "m0.1", T0 + i + 0.2, T0 + i + 0.4, 2 * i + 1))
        rows.append(applied(f"b{i}", "b", 1, "m1.1", T0 + i + 0.3, T0 + i + 0.5, 2 * i + 2))
    return rows


def codes(rows: list[dict[str, Any]], rules: PoolRules | None = None) -> list[str]:
    return [str(f.code) for f in check(rows, rules or PoolRules()).findings]


def test_a_clean_pool_history_passes() -> None:
    v = check(clean())
    assert v.ok and v.sends == 6 and v.lost == v.duplicated == v.out_of_order == 0


def test_an_event_never_applied_is_lost() -> None:
    rows = [r for r in clean() if not (r["op"] == "applied" and r["msgId"] == "b1")]
    v = check(rows)
    assert v.lost == 1 and codes(rows) == [Violation.LOST]


def test_two_effect_rows_for_one_event_are_a_duplicate() -> None:
    rows = [*clean(), applied("a2", "a", 0, "m0.1", T0 + 5, T0 + 5.1, 99)]
    assert check(rows).duplicated == 1 and Violation.DUPLICATED in codes(rows)


def test_applied_and_parked_is_a_duplicate() -> None:
    rows = [*clean(), {"op": "parked", "msgId": "a1", "key": "a", "seq": 1, "reason": "X"}]
    assert codes(rows) == [Violation.DUPLICATED]


def test_one_partition_on_two_members_at_once_is_an_overlap() -> None:
    rows = clean()
    # a0 ran on m0 from +0.2 to +0.4; a "moved" a1 starts on m2 at +0.3, before that ended
    rows[-4] = applied("a1", "a", 0, "m2.1", T0 + 0.3, T0 + 1.4, 3)
    assert PoolViolation.OVERLAP in codes(rows)


def test_one_partition_on_two_members_one_after_the_other_is_fine() -> None:
    rows = clean()
    rows[-2] = applied("a2", "a", 0, "m2.1", T0 + 2.2, T0 + 2.4, 5)  # moved after a1 ended
    assert check(rows).ok


def test_a_key_applied_out_of_submit_order_is_caught() -> None:
    rows = clean()
    rows[-4] = applied("a1", "a", 0, "m0.1", T0 + 2.5, T0 + 2.6, 7)  # after a2 (2.2-2.4)
    assert check(rows).out_of_order == 1 and Violation.OUT_OF_ORDER in codes(rows)


def test_an_effect_of_an_event_never_submitted_is_unknown() -> None:
    rows = [*clean(), applied("zz", "a", 0, "m0.1", T0 + 9, T0 + 9.1, 50)]
    assert codes(rows) == [Violation.UNKNOWN_MSG]


def test_incarnations_are_one_instance() -> None:
    assert instance("m1.2") == "m1" and instance("x0.1") == "x0"


def _static_fault(target: str, at: float, heal: float) -> list[dict[str, Any]]:
    return [{"op": "fault", "t": at, "name": "static_kill9"},
            {"op": "heal", "t": heal, "name": "static_kill9", "target": target}]  # fmt: skip


def test_static_restart_keeps_the_instance_and_the_others_flow() -> None:
    rows = clean()
    rows[-2] = applied("a2", "a", 0, "m0.2", T0 + 2.2, T0 + 2.4, 5)  # m0's next incarnation
    rows += _static_fault("m0", T0 + 1.45, T0 + 1.9)  # m1 applied b1 ... b2 meanwhile
    assert check(rows, PoolRules(static=True)).ok


def test_static_restart_that_moved_a_partition_is_reassigned() -> None:
    rows = clean()
    rows[-2] = applied("a2", "a", 0, "m1.1", T0 + 2.2, T0 + 2.4, 5)
    assert codes(rows, PoolRules(static=True)) == [PoolViolation.REASSIGNED]
    assert check(rows).ok  # not a static scenario: a move is allowed


def test_static_restart_that_stopped_the_others_is_stalled() -> None:
    rows = [r for r in clean() if r["msgId"] not in ("b1", "b2")]
    rows += [send("b1", "b", 1, 1, T0 + 1.6)]  # sent while m0 was down
    rows.append(applied("b1", "b", 1, "m1.1", T0 + 4.5, T0 + 4.6, 20))  # after the window
    rows += _static_fault("m0", T0 + 1.45, T0 + 2.5)
    assert PoolViolation.STALLED in codes(rows, PoolRules(static=True))


POISON = PoolRules(poison=True, min_attempts=3, max_attempts=4, min_backoff_s=0.3)


def poisoned() -> list[dict[str, Any]]:
    """Key p's seq 1 is poison: three attempts (one member change), quarantined; seq 2 parked;
    key b goes on meanwhile."""
    rows = [
        send("p0", "p", 0, 0, T0), send("p1", "p", 1, 0, T0 + 0.1, poison=True),
        send("p2", "p", 2, 0, T0 + 0.2), send("b0", "b", 0, 1, T0 + 0.3),
        send("b1", "b", 1, 1, T0 + 1.5),
        applied("p0", "p", 0, "m0.1", T0 + 0.05, T0 + 0.08, 1),
        applied("b0", "b", 1, "m1.1", T0 + 0.4, T0 + 0.5, 2),
        applied("b1", "b", 1, "m1.1", T0 + 1.6, T0 + 1.7, 3),
    ]  # fmt: skip
    for i, (member, start) in enumerate([("m0.1", 0.2), ("m0.1", 0.8), ("m2.1", 1.5)]):
        rows.append({"op": "attempt", "msgId": "p1", "member": member, "key": "p",
                     "started_ms": int((T0 + start) * 1000),
                     "ended_ms": int((T0 + start + 0.01) * 1000) + i})  # fmt: skip
    q_ms = int((T0 + 2.0) * 1000)
    rows += [
        {"op": "dead_letter", "msgId": "p1", "key": "p", "seq": 0, "reason": "RETRIES_EXHAUSTED",
         "t_ms": q_ms},
        {"op": "parked", "msgId": "p2", "key": "p", "seq": 1, "reason": "RETRIES_EXHAUSTED",
         "t_ms": q_ms + 5},
        {"op": "quarantined", "key": "p", "reason": "RETRIES_EXHAUSTED", "t_ms": q_ms},
    ]  # fmt: skip
    return rows


def test_a_poison_retried_quarantined_with_its_key_parked_passes() -> None:
    v = check(poisoned(), POISON)
    assert v.ok, v.findings
    assert v.lost == 0 and v.sends == 5


def test_a_poison_quarantined_without_its_retries_is_caught() -> None:
    rows = [r for r in poisoned() if not (r["op"] == "attempt" and r["member"] == "m2.1")]
    assert codes(rows, POISON) == [PoolViolation.NOT_RETRIED]


def test_attempts_without_backoff_are_caught() -> None:
    rows = poisoned()
    for r in rows:
        if r["op"] == "attempt" and r["started_ms"] == int((T0 + 0.8) * 1000):
            r["started_ms"] = int((T0 + 0.25) * 1000)  # 40 ms after the first attempt ended
    assert codes(rows, POISON) == [PoolViolation.NOT_RETRIED]


def test_a_lost_quarantine_is_caught() -> None:
    rows = [r for r in poisoned() if r["op"] != "quarantined"]
    assert codes(rows, POISON) == [PoolViolation.NOT_QUARANTINED]


def test_a_record_applied_past_its_poison_is_out_of_order() -> None:
    rows = [r for r in poisoned() if r["op"] != "parked"]
    rows.append(applied("p2", "p", 0, "m2.1", T0 + 2.1, T0 + 2.2, 9))
    v = check(rows, POISON)
    assert v.out_of_order == 1 and codes(rows, POISON) == [Violation.OUT_OF_ORDER]


def test_records_parked_out_of_order_are_caught() -> None:
    rows = [*poisoned(), send("p3", "p", 3, 0, T0 + 0.25)]
    rows.insert(-1, {"op": "parked", "msgId": "p3", "key": "p", "seq": 2, "reason": "R"})
    # p3 (seq 3) parked before p2 (seq 2)
    parked = [r for r in rows if r["op"] == "parked"]
    rows = [r for r in rows if r["op"] != "parked"] + parked[::-1]
    assert Violation.OUT_OF_ORDER in codes(rows, POISON)


def test_other_keys_stalled_during_the_retries_are_caught() -> None:
    rows = [r for r in poisoned() if r.get("msgId") not in ("b0", "b1")]
    assert codes(rows, POISON) == [PoolViolation.STALLED]


def test_a_dead_letter_without_a_reason_is_caught() -> None:
    rows = poisoned()
    next(r for r in rows if r["op"] == "dead_letter")["reason"] = ""
    assert codes(rows, POISON) == [Violation.NO_REASON]


def test_a_retry_budget_started_again_by_each_new_owner_is_caught() -> None:
    """R-RETRY-3, a retry limit: 3 attempts on m0, the partition moves, 3 more on m3
    (the budget counted per owner) exceed the limit."""
    rows = poisoned()
    for i in range(3):
        start = int((T0 + 1.0 + 0.4 * i) * 1000)
        rows.append({"op": "attempt", "msgId": "p1", "member": "m3.1", "key": "p",
                     "started_ms": start, "ended_ms": start + 10})  # fmt: skip
    assert codes(rows, POISON) == [PoolViolation.RETRY_BUDGET]
