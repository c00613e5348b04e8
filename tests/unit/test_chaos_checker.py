"""The chaos checker on hand-made histories: one that passes, and one failing each rule."""

from __future__ import annotations

from typing import Any

from pipeline.chaos.checker import Violation, check
from pipeline.chaos.history import DeliveryPath, HistoryWriter, Op, read_history


def send(mid: str, seq: int, *, to: str = "main-b", path: str = "pull") -> dict[str, Any]:
    kind = "REPLY" if path == DeliveryPath.PULL else "SEND"
    return {"op": "send", "msgId": mid, "from": "main-a", "to": to, "kind": kind, "seq": seq,
            "path": path}  # fmt: skip


def out(op: Op, mid: str, **kw: Any) -> dict[str, Any]:
    return {"op": str(op), "msgId": mid, **kw}


def brief(mid: str, seq: int) -> dict[str, Any]:
    return send(mid, seq, to="worker-b", path=DeliveryPath.INJECT)


def test_a_clean_history_passes() -> None:
    h = [
        send("r0", 0), send("r1", 1), send("r2", 2), brief("b0", 0), brief("b1", 1),
        brief("b2", 2), send("r3", 3),
        {"op": "fault", "name": "kill9"}, {"op": "recovered", "seconds": 2.5},
        out(Op.HELD, "r0"), out(Op.HELD, "r1"), out(Op.DEAD_LETTER, "r2", reason="EXPIRED"),
        out(Op.INJECTED, "b0"), out(Op.FAILED, "b1", reason="INJECT_TIMEOUT"),
        out(Op.INJECTED, "b2"), out(Op.UNSHIPPED, "r3"),
    ]  # fmt: skip
    v = check(h)
    assert v.ok, v.findings
    assert (v.sends, v.faults, v.lost, v.duplicated, v.out_of_order, v.unseen) == (7, 1, 0, 0, 0, 1)
    assert v.slowest_recovery_s == 2.5


def test_an_acknowledged_send_with_no_outcome_is_lost() -> None:
    v = check([send("r0", 0), send("r1", 1), out(Op.HELD, "r0")])
    assert v.lost == 1 and [f.msg_id for f in v.findings] == ["r1"]
    assert v.findings[0].code == Violation.LOST


def test_a_lost_send_before_a_delivered_one_is_also_a_gap() -> None:
    v = check([send("r0", 0), send("r1", 1), out(Op.HELD, "r1")])
    assert v.lost == 1 and v.count(Violation.GAP) == 1 and v.out_of_order == 1


def test_a_pull_path_send_is_not_answered_by_a_failed_alone_when_it_was_held_twice() -> None:
    v = check([send("r0", 0), out(Op.HELD, "r0"), out(Op.HELD, "r0")])
    assert v.duplicated == 1 and v.count(Violation.DUPLICATED) == 1


def test_two_injects_of_one_brief_are_a_duplicate() -> None:
    v = check([brief("b0", 0), out(Op.INJECTED, "b0"), out(Op.INJECTED, "b0")])
    assert v.duplicated == 1 and not v.ok


def test_two_failed_for_one_brief_are_a_duplicate() -> None:
    h = [brief("b0", 0), out(Op.FAILED, "b0", reason="X"), out(Op.FAILED, "b0", reason="X")]
    assert check(h).count(Violation.DUPLICATED) == 1


def test_an_injected_brief_reported_failed_is_a_conflict() -> None:
    h = [brief("b0", 0), out(Op.INJECTED, "b0"), out(Op.FAILED, "b0", reason="INJECT_TIMEOUT")]
    v = check(h)
    assert v.count(Violation.CONFLICT) == 1 and v.duplicated == 1 and v.lost == 0


def test_a_late_injected_the_sender_recorded_is_its_own_column_not_a_conflict() -> None:
    """The forward path's residual window (docs/gateway.md): injected just before the deadline,
    its INJECTED delayed past the sender's FAILED. Counted as ``late``, never silently ok; the
    same pair without the sender's record stays a conflict."""
    h = [brief("b0", 0), brief("b1", 1),
         out(Op.INJECTED, "b0"), out(Op.FAILED, "b0", reason="INJECT_TIMEOUT"),
         out(Op.LATE_INJECTED, "b0"),
         out(Op.INJECTED, "b1"), out(Op.FAILED, "b1", reason="INJECT_TIMEOUT")]  # fmt: skip
    v = check(h)
    assert v.late == 1
    assert [(f.code, f.msg_id) for f in v.findings] == [(Violation.CONFLICT, "b1")]


def test_an_uncertain_brief_is_its_own_column_never_lost_a_gap_or_a_conflict() -> None:
    """The inject journal's report: "may have been injected". Injected once (b0, its INJECT_TIMEOUT
    came first), or not at all (b1, the crash came before the inject): either way counted as
    ``uncertain``, neither lost, a gap before b2, nor a conflict. Injected twice stays a dup."""
    h = [brief("b0", 0), brief("b1", 1), brief("b2", 2), brief("b3", 3),
         out(Op.INJECTED, "b0"), out(Op.FAILED, "b0", reason="INJECT_TIMEOUT"),
         out(Op.INJECT_UNCERTAIN, "b0"), out(Op.INJECT_UNCERTAIN, "b1"),
         out(Op.INJECTED, "b2"),
         out(Op.INJECTED, "b3"), out(Op.INJECTED, "b3"), out(Op.INJECT_UNCERTAIN, "b3")]  # fmt: skip
    v = check(h)
    assert (v.uncertain, v.lost, v.out_of_order) == (3, 0, 0)
    assert [(f.code, f.msg_id) for f in v.findings] == [(Violation.DUPLICATED, "b3")]
    strict = check([brief("b0", 0), out(Op.INJECT_UNCERTAIN, "b0")], strict=True)
    assert strict.count(Violation.NOT_CLEAN) == 1, "an orderly stop leaves nothing uncertain"


def test_holds_out_of_send_order_are_found() -> None:
    h = [send("r0", 0), send("r1", 1), send("r2", 2),
         out(Op.HELD, "r0"), out(Op.HELD, "r2"), out(Op.HELD, "r1")]  # fmt: skip
    v = check(h)
    assert v.out_of_order == 1 and v.findings[0].msg_id == "r1" and v.lost == 0


def test_order_is_per_stream_so_interleaved_streams_pass() -> None:
    h = [send("r0", 0), brief("b0", 0), send("r1", 1), brief("b1", 1),
         out(Op.INJECTED, "b0"), out(Op.INJECTED, "b1"), out(Op.HELD, "r0"), out(Op.HELD, "r1")]  # fmt: skip
    assert check(h).ok


def test_a_rejection_without_a_reason_is_a_finding() -> None:
    for op in (Op.DEAD_LETTER, Op.FAILED, Op.REJECTED):
        v = check([brief("b0", 0), out(op, "b0", reason="")])
        assert v.count(Violation.NO_REASON) == 1, op


def test_a_delivery_never_sent_is_reported() -> None:
    assert check([out(Op.HELD, "ghost")]).count(Violation.UNKNOWN_MSG) == 1


def test_a_failed_alone_does_not_account_for_a_pull_path_reply_without_a_reason() -> None:
    v = check([send("r0", 0), out(Op.FAILED, "r0", reason="")])
    assert v.count(Violation.NO_REASON) == 1


def test_the_history_file_round_trips_and_skips_a_torn_line(tmp_path: Any) -> None:
    path = tmp_path / "h.jsonl"
    w = HistoryWriter(path)
    w.write(Op.SEND, msgId="r0", **{"from": "main-a"}, to="main-b", kind="REPLY", seq=0,
            path="pull")  # fmt: skip
    w.extend([out(Op.HELD, "r0")])
    w.close()
    with path.open("a") as f:
        f.write('{"op": "held", "msg')
    rows = list(read_history(path))
    assert [r["op"] for r in rows] == ["send", "held"]
    assert check(rows).ok


def test_strict_mode_refuses_any_failed_or_dead_letter() -> None:
    h = [brief("b0", 0), out(Op.FAILED, "b0", reason="INJECT_TIMEOUT"),
         send("r0", 0), out(Op.DEAD_LETTER, "r0", reason="EXPIRED")]  # fmt: skip
    assert check(h).ok
    assert check(h, strict=True).count(Violation.NOT_CLEAN) == 2


def test_a_send_refused_locally_is_counted_apart_and_is_not_a_violation() -> None:
    v = check([{"op": "rejected", "msgId": "", "reason": "UNKNOWN_RECIPIENT", "local": True}])
    assert v.ok and v.refused == 1 and v.sends == 0


# -- conversations: every acknowledged ASK ends exactly once ------------------------------------
def ask(mid: str, seq: int, turn: str) -> dict[str, Any]:
    return {"op": "send", "msgId": mid, "from": "worker-a", "to": "main-b", "kind": "ASK",
            "seq": seq, "path": "pull", "turnId": turn}  # fmt: skip


def answer(mid: str, seq: int, turn: str) -> dict[str, Any]:
    return {"op": "send", "msgId": mid, "from": "main-b", "to": "worker-a", "kind": "ANSWER",
            "seq": seq, "path": "pull", "turnId": turn}  # fmt: skip


def test_each_ask_ends_once_by_answer_no_waiter_or_expiry() -> None:
    h = [
        ask("q0", 0, "t0"), ask("q1", 1, "t1"), ask("q2", 2, "t2"), ask("q3", 3, "t3"),
        out(Op.HELD, "q0"), answer("a0", 0, "t0"), out(Op.HELD, "a0", to="worker-a"),
        {"op": "no_waiter", "turnId": "t1", "reason": "NO_WAITER"},
        out(Op.HELD, "q2"), answer("a2", 1, "t2"),
        {"op": "too_late", "turnId": "t2", "reason": "TOO_LATE"},
        out(Op.FAILED, "q2", reason="EXPIRED", stage="expiry"),
        out(Op.DEAD_LETTER, "q3", reason="EXPIRED"), out(Op.FAILED, "q3", reason="EXPIRED"),
    ]  # fmt: skip
    v = check(h)
    assert v.ok, v.findings
    assert (v.asks, v.sends, v.lost) == (4, 6, 0)
    assert not check(h, strict=True).ok  # NO_WAITER, TOO_LATE and expiry are not clean


def test_an_ask_held_and_answered_but_the_answer_never_held_is_unanswered() -> None:
    v = check([ask("q0", 0, "t0"), out(Op.HELD, "q0"), answer("a0", 0, "t0")])
    assert v.count(Violation.UNANSWERED) == 1 and v.count(Violation.LOST) == 1  # and the ANSWER
    assert v.lost == 2


def test_an_ask_nobody_answered_and_whose_turn_never_expired_is_unanswered() -> None:
    v = check([ask("q0", 0, "t0"), out(Op.HELD, "q0")])
    assert [f.code for f in v.findings] == [Violation.UNANSWERED]


def test_an_answer_swept_undrained_past_its_expiry_ends_the_conversation() -> None:
    """R-EXP-2 (the sweeper), R-CONV-3: an ANSWER held for the asker but never drained is
    dead-lettered EXPIRED past its expiresAt -- the turn closed answered, so no expiry FAILED
    comes. That reasoned dead letter is the conversation's end (the ``leader-kill9`` chaos
    scenario: a repetition that
    outlived the ANSWERs' ttl read 50 UNANSWERED); any other dead letter of the ANSWER is not."""
    h = [ask("q0", 0, "t0"), out(Op.HELD, "q0"), answer("a0", 0, "t0"),
         out(Op.DEAD_LETTER, "a0", reason="EXPIRED")]  # fmt: skip
    v = check(h)
    assert v.ok, v.findings
    h[-1] = out(Op.DEAD_LETTER, "a0", reason="SIG_INVALID")
    assert check(h).count(Violation.UNANSWERED) == 1


def test_an_ask_still_in_an_outbox_is_unseen_not_unanswered() -> None:
    v = check([ask("q0", 0, "t0"), out(Op.UNSHIPPED, "q0")])
    assert v.ok and v.unseen == 1
    v = check([ask("q0", 0, "t0"), out(Op.HELD, "q0"), answer("a0", 0, "t0"),
               out(Op.UNSHIPPED, "a0")])  # fmt: skip
    assert v.ok and v.unseen == 1


def test_an_ask_answered_and_also_expired_ended_twice() -> None:
    v = check([ask("q0", 0, "t0"), out(Op.HELD, "q0"), answer("a0", 0, "t0"),
               out(Op.HELD, "a0"), out(Op.FAILED, "q0", reason="EXPIRED")])  # fmt: skip
    assert v.count(Violation.DUPLICATED) == 1 and "ended 2 times" in v.findings[0].detail


def test_an_answer_held_twice_is_one_duplicate_not_two_ends() -> None:
    v = check([ask("q0", 0, "t0"), out(Op.HELD, "q0"), answer("a0", 0, "t0"),
               out(Op.HELD, "a0"), out(Op.HELD, "a0")])  # fmt: skip
    assert v.count(Violation.DUPLICATED) == 1


def test_a_refusal_about_a_turn_needs_its_reason() -> None:
    v = check([ask("q0", 0, "t0"), {"op": "no_waiter", "turnId": "t0", "reason": ""}])
    assert v.count(Violation.NO_REASON) == 1


# -- broadcasts: each member on each staged host holds it once ----------------------------------
MEMBERS = {"A": ["worker-a"], "B": ["main-b"]}


def bcast(mid: str, hosts: int = 2) -> dict[str, Any]:
    return {"op": "broadcast", "msgId": mid, "from": "main-a", "group": "crew", "hosts": hosts,
            "members": MEMBERS}  # fmt: skip


def staged(mid: str, *hosts: str) -> list[dict[str, Any]]:
    return [{"op": "staged", "msgId": mid, "host": h} for h in hosts]


def test_a_broadcast_held_once_by_each_member_passes() -> None:
    h = [
        bcast("x0"), *staged("x0", "A", "B"), out(Op.HELD, "x0", to="worker-a"),
        out(Op.HELD, "x0", to="main-b"),
        bcast("x1", 1), *staged("x1", "A"), out(Op.HELD, "x1", to="worker-a"),  # B was away
        bcast("x2"), *staged("x2", "A", "B"), out(Op.HELD, "x2", to="worker-a"),
        out(Op.DEAD_LETTER, "x2", reason="EXPIRED", at="B"),
        bcast("x3"), *staged("x3", "A", "B"), out(Op.UNSHIPPED, "x3", at="A"),
        out(Op.HELD, "x3", to="main-b"),
    ]  # fmt: skip
    v = check(h)
    assert v.ok, v.findings
    assert (v.broadcasts, v.lost, v.unseen, v.sends) == (4, 0, 1, 0)


def test_a_broadcast_member_that_never_held_it_is_lost() -> None:
    v = check([bcast("x0"), *staged("x0", "A", "B"), out(Op.HELD, "x0", to="worker-a")])
    assert v.lost == 1 and v.findings[0].code == Violation.LOST
    assert v.findings[0].detail == "broadcast to main-b"


def test_a_broadcast_held_twice_by_one_member_is_a_duplicate() -> None:
    v = check([bcast("x0"), *staged("x0", "A", "B"), out(Op.HELD, "x0", to="worker-a"),
               out(Op.HELD, "x0", to="main-b"), out(Op.HELD, "x0", to="main-b")])  # fmt: skip
    assert [f.code for f in v.findings] == [Violation.DUPLICATED] and v.duplicated == 1


def test_a_broadcast_staged_for_fewer_hosts_than_acknowledged_is_lost() -> None:
    v = check([bcast("x0"), *staged("x0", "A"), out(Op.HELD, "x0", to="worker-a")])
    assert v.count(Violation.LOST) == 1 and "staged for ['A']" in v.findings[0].detail


def test_a_broadcast_held_by_a_non_member_is_unknown() -> None:
    v = check([bcast("x0", 1), *staged("x0", "A"), out(Op.HELD, "x0", to="worker-a"),
               out(Op.HELD, "x0", to="main-b")])  # fmt: skip
    assert [f.code for f in v.findings] == [Violation.UNKNOWN_MSG]


# -- runs: per (BranchKey, Lsn), applied in lsn order without gaps ------------------------------
def step(branch: str, lsn: int) -> dict[str, Any]:
    return {"op": "run_step", "branchKey": branch, "lsn": lsn, "runId": branch, "step": lsn}


def applied(branch: str, *lsns: int) -> list[dict[str, Any]]:
    return [{"op": "run_applied", "branchKey": branch, "lsn": n} for n in lsns]


def test_runs_applied_in_lsn_order_pass_and_an_unshipped_tail_is_unseen() -> None:
    h = [*(step("c/r0/b1", n) for n in (1, 2, 3)), *(step("c/r1/b1", n) for n in (1, 2, 3)),
         *applied("c/r0/b1", 1, 2, 3), *applied("c/r1/b1", 1, 2),
         {"op": "run_unshipped", "branchKey": "c/r1/b1", "lsn": 3}]  # fmt: skip
    v = check(h)
    assert v.ok, v.findings
    assert (v.run_steps, v.unseen, v.lost) == (6, 1, 0)


def test_a_run_step_applied_out_of_lsn_order_is_a_run_order_finding() -> None:
    v = check([*(step("c/r0/b1", n) for n in (1, 2, 3)), *applied("c/r0/b1", 1, 3, 2)])
    assert v.count(Violation.RUN_ORDER) == 2 and v.out_of_order == 2  # 3 skips 2; 2 after 3


def test_a_gap_in_a_branch_is_found_and_the_missing_step_is_lost() -> None:
    v = check([*(step("c/r0/b1", n) for n in (1, 2, 3)), *applied("c/r0/b1", 1, 3)])
    assert v.count(Violation.RUN_ORDER) == 1 and v.count(Violation.LOST) == 1
    assert {f.msg_id for f in v.findings} == {"c/r0/b1#3", "c/r0/b1#2"}


def test_a_run_step_applied_twice_is_a_duplicate() -> None:
    v = check([step("c/r0/b1", 1), *applied("c/r0/b1", 1, 1)])
    assert [f.code for f in v.findings] == [Violation.DUPLICATED]


def test_a_committed_run_step_never_applied_is_lost_unless_refused_with_a_reason() -> None:
    v = check([step("c/r0/b1", 1), step("c/r0/b1", 2), *applied("c/r0/b1", 1)])
    assert [(f.code, f.msg_id) for f in v.findings] == [(Violation.LOST, "c/r0/b1#2")]
    refused = {"op": "run_rejected", "branchKey": "c/r0/b1", "lsn": 2, "reason": "TOO_LARGE"}
    assert check([step("c/r0/b1", 1), step("c/r0/b1", 2), *applied("c/r0/b1", 1), refused]).ok
    assert not check([step("c/r0/b1", 2), refused], strict=True).ok


def test_pending_counts_what_has_no_outcome_yet() -> None:
    from pipeline.chaos.checker import pending

    h = [send("r0", 0), send("r1", 1), out(Op.HELD, "r0"), ask("q0", 0, "t0"),
         out(Op.HELD, "q0"), bcast("x0"), *staged("x0", "A", "B"),
         out(Op.HELD, "x0", to="main-b"), step("c/r0/b1", 1)]  # fmt: skip
    assert pending(h) == 3  # r1, the ASK's end, worker-a's broadcast; run steps are not counted


def bad(mid: str, variant: str = "forged") -> dict[str, Any]:
    return {"op": "bad", "msgId": mid, "variant": variant, "to": "main-b"}


def test_bad_records_dead_lettered_with_a_reason_pass_and_count() -> None:
    """R-DLQ-5: every rejection carries a reason code. A bad record (garbage, forged, a
    stranger's) that B dead-lettered with its reason, or refused, is the defined outcome."""
    h = [bad("x0", "garbage"), bad("x1"), bad("x2", "stranger"),
         out(Op.DEAD_LETTER, "x0", reason="MISSING_HEADER"),
         out(Op.DEAD_LETTER, "x1", reason="SIG_INVALID"), out(Op.DEAD_LETTER, "x1", reason="SIG_INVALID"),
         out(Op.REJECTED, "x2", reason="OFFSETS_LOST")]  # fmt: skip
    v = check(h)
    assert v.ok, v.findings
    assert (v.bad, v.lost, v.sends) == (3, 0, 0)


def test_a_bad_record_held_is_accepted_and_one_never_rejected_is_lost() -> None:
    h = [bad("x0"), bad("x1"), out(Op.HELD, "x0"), out(Op.DEAD_LETTER, "x0", reason="SIG_INVALID")]
    v = check(h)
    assert [(f.code, f.msg_id) for f in v.findings] == [
        (Violation.BAD_ACCEPTED, "x0"), (Violation.BAD_UNREJECTED, "x1")
    ]  # fmt: skip
    assert v.lost == 1


def test_a_bad_records_dead_letter_without_a_reason_is_a_finding() -> None:
    v = check([bad("x0"), out(Op.DEAD_LETTER, "x0", reason="")])
    assert v.count(Violation.NO_REASON) == 1


def test_a_gateway_burning_a_core_in_the_quiet_window_hot_loops_and_a_gone_one_died() -> None:
    """R-ENV-4: no process hot-loops or dies on a bad record."""
    idle = {"op": "cpu", "name": "A", "cpu_s": 0.08, "wall_s": 3.0}
    hot = {"op": "cpu", "name": "B", "cpu_s": 2.9, "wall_s": 3.0}
    gone = {"op": "exited", "name": "B", "exit_code": 1}
    assert check([idle]).ok
    v = check([idle, hot, gone])
    assert [(f.code, f.msg_id) for f in v.findings] == [
        (Violation.HOT_LOOP, "B"), (Violation.DIED, "B")
    ]  # fmt: skip


def test_a_local_refusal_is_a_finding_only_under_a_strict_fault() -> None:
    """A restart is not a departure (R-PRES-7): under an orderly fault (clean-restart,
    rolling-restart) a send the client refused counts as a finding, not a footnote."""
    h = [send("r0", 0), out(Op.HELD, "r0"),
         {"op": Op.REJECTED, "msgId": "", "reason": "UNKNOWN_RECIPIENT", "local": True}]  # fmt: skip
    assert check(h).ok and check(h).refused == 1
    strict = check(h, strict=True)
    assert strict.refused == 1 and strict.count(Violation.REFUSED) == 1 and not strict.ok
