"""The hot-path table (bench/bench_hotpath.py): a row is met only when every repeat meets it."""

from __future__ import annotations

from typing import Any

from bench.bench_hotpath import table


def _spread(lo: float, mid: float, hi: float) -> dict[str, float]:
    return {"min": lo, "median": mid, "max": hi}


def _rows(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["row"]: r for r in table(out)}


def test_a_target_met_by_the_median_but_missed_by_one_repeat_is_not_met() -> None:
    out = {
        "latency_sqlite": {
            "summary": {
                "at_500": {
                    "send_to_held_p99_ms": _spread(6.0, 8.0, 12.0),
                    "send_to_injected_p99_ms": _spread(10.0, 20.0, 24.0),
                    "floor_one_hop_p99_ms": _spread(3.0, 4.0, 5.0),
                }
            }
        },
        "runtime": {"runtime_over_hand": _spread(0.86, 0.9, 0.95)},
        "outbox": {"latency": {"down_vs_up_per_round": _spread(0.5, 0.9, 1.2)}},
    }
    rows = _rows(out)
    assert not rows["send -> held p99 at 500 msg/s, sqlite (ms)"]["met"]
    assert rows["send -> INJECTED p99 at 500 msg/s, sqlite (ms)"]["met"]
    assert rows["consume runtime / hand loop, wall"]["met"]
    assert not rows["broker-down / broker-up run latency"]["met"]
    held = rows["send -> held p99 at 500 msg/s, sqlite (ms)"]["measured"]
    assert held == _spread(6.0, 8.0, 12.0)


def test_a_section_that_failed_is_reported_as_not_measured_never_as_met() -> None:
    rows = _rows({"runtime": {"error": "TimeoutError: no broker"}, "cli": {}})
    ceiling = "  the same over its ceiling (= runtime / hand_async, same repeat)"
    assert rows[ceiling] == {
        "row": ceiling,
        "target": ">= 0.9",
        "measured": None,
        "met": False,
    }
    assert all(r["measured"] is None and not r["met"] for r in rows.values())


def test_the_sender_row_reads_what_the_gateway_committed_not_what_was_offered() -> None:
    at = {
        "committed_msg_per_s": _spread(1200, 1500, 1990),
        "achieved_msg_per_s": _spread(2000, 2000, 2000),
    }
    rows = _rows({"sender": {"summary": {"at_2500": at}}})
    row = rows["one sender offering 2,500 msg/s: committed by its gateway (msg/s)"]
    assert row["measured"]["min"] == 1200 and not row["met"]


def test_a_reply_never_held_fails_its_row_whatever_the_p99_of_the_rest() -> None:
    """Once, one reply in 10,000 was dead-lettered (the held cap) and the p99 over the
    other 9,999 read as if nothing was missing."""
    from bench.latency import _not_arrived

    phase = {"send_to_held_ms": {"n": 9999, "of": 10_000}, "send_to_injected_ms": {"of": 0}}
    assert _not_arrived(phase) == 1
    at = {"committed_msg_per_s": _spread(2000, 2000, 2000), "not_arrived": _spread(0, 0, 1)}
    row = _rows({"sender": {"summary": {"at_2500": at}}})["  of them never held within 60 s"]
    assert row["measured"]["max"] == 1 and not row["met"]


def test_the_issue_targets_of_the_pull_and_faststream_rows_are_ratios_within_one_repeat() -> None:
    rows = _rows(
        {
            "runtime": {
                "runtime_over_hand_async": _spread(0.8, 0.92, 0.95),
                "signed_pull_2threads_over_verify_alone": _spread(1.21, 1.3, 1.4),
            }
        }
    )
    assert not rows["  the same over its ceiling (= runtime / hand_async, same repeat)"]["met"]
    assert rows["  the same / Ed25519 verify alone on 1 core, same repeat"]["met"]
