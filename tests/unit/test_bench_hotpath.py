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
    assert rows["  the same / Ed25519 verify alone on 1 core (the fabric's verifier), same repeat"]["met"]


def test_latency_targets_per_store_and_postgresql_read_against_sqlite() -> None:
    """≤ 10 / 25 ms on SQLite, ≤ 15 / 40 ms on PostgreSQL, and PostgreSQL's rows within 1.5 x
    SQLite's: a PostgreSQL held p99 of 12 ms meets its row where the same on SQLite does not."""
    at = {
        "send_to_held_p99_ms": _spread(11.0, 12.0, 14.0),
        "send_to_injected_p99_ms": _spread(30.0, 35.0, 39.0),
    }
    lite = {
        "send_to_held_p99_ms": _spread(7.0, 8.0, 9.0),
        "send_to_injected_p99_ms": at["send_to_injected_p99_ms"],
    }
    rows = _rows(
        {
            "latency_sqlite": {"summary": {"at_500": lite}},
            "latency_postgresql": {"summary": {"at_500": at}},
        }
    )
    assert rows["send -> held p99 at 500 msg/s, postgresql (ms)"]["met"]
    assert rows["send -> INJECTED p99 at 500 msg/s, postgresql (ms)"]["met"]
    assert not rows["send -> INJECTED p99 at 500 msg/s, sqlite (ms)"]["met"]
    held = rows["send -> held p99 at 500 msg/s, postgresql / sqlite, medians (x)"]
    assert held["measured"]["median"] == 1.5 and held["met"]
    injected = rows["send -> INJECTED p99 at 500 msg/s, postgresql / sqlite, medians (x)"]
    assert injected["measured"]["median"] == 1.0


def test_past_the_knee_reads_the_first_failed_step_of_each_repeat() -> None:
    from bench.knee import of_run, past_the_knee

    def phase(p99: float, busy: float, a: float) -> dict[str, Any]:
        return {
            "offered_msg_per_s": 1000,
            "achieved_msg_per_s": 1000,
            "send_to_held_ms": {"p99": p99, "n": 10, "of": 10},
            "send_to_injected_ms": {"of": 0},
            "cpu": {"machine_busy": busy},
            "cpu_us_per_msg": {"gateway_A": a, "gateway_B": 200.0, "broker": 100.0, "bench": 50.0},
        }

    failed_twice = {"at_500": phase(20, 0.4, 300), "at_1000": phase(60, 0.9, 250)}
    passed_all = {"at_500": phase(20, 0.4, 300), "at_1000": phase(30, 0.7, 250)}
    runs = [of_run(failed_twice, (500, 1000)), of_run(passed_all, (500, 1000))]
    assert [r["knee_msg_per_s"] for r in runs] == [500, 1000]
    past = past_the_knee(runs)
    assert past == {
        "machine_busy": [0.9],
        "all_us_per_msg": [600.0],
        "not_gateways_us_per_msg": [150.0],
    }
    rows = _rows(
        {"knee_sqlite": {"past_the_knee": {k: _spread(v[0], v[0], v[0]) for k, v in past.items()}}}
    )
    assert (
        rows["  sqlite: the first step past the knee, machine busy (share of all cores)"][
            "measured"
        ]["median"]
        == 0.9
    )


def test_rate_split_recovers_a_fixed_part_and_a_margin_and_the_table_shows_them() -> None:
    """A gateway that spends 0.3 cores whatever the rate plus 150 µs per message reads 0.3 and
    150 back (its µs per message at 500 msg/s is 750, at 2,000 300); fewer than three steps
    with figures give no split (a line through two points fits anything)."""
    from bench.knee import rate_split, rate_splits

    def step(rate: int, fixed: float, margin: float) -> dict[str, Any]:
        us = (fixed * 1e6 + margin * rate) / rate
        return {"offered": rate, "cpu_us_per_msg": {"gateway_A": us, "gateway_B": us / 2}}

    run = {"steps": [step(r, 0.3, 150.0) for r in (500, 1000, 1500, 2000)]}
    assert run["steps"][0]["cpu_us_per_msg"]["gateway_A"] == 750.0
    split = rate_split(run, "gateway_A")
    assert split is not None
    assert split["margin_us_per_msg"] == 150.0 and split["fixed_cores"] == 0.3
    assert split["r2"] == 1.0 and split["steps"] == 4
    assert rate_split({"steps": run["steps"][:2]}, "gateway_A") is None
    noisy = {"steps": [step(500, 0.3, 150.0), step(1000, 0.35, 150.0), step(1500, 0.3, 150.0)]}
    assert 0 < rate_split(noisy, "gateway_A")["r2"] < 1  # type: ignore[index]
    both = rate_splits([run, {"steps": run["steps"][:2]}])
    assert both["gateway_A"]["fixed_cores"] == [0.3]  # the short repeat adds none
    assert both["gateway_B"]["fixed_cores"] == [0.15]
    rows = _rows(
        {
            "knee_sqlite": {
                "rate_split": {
                    "gateway_B": {
                        "margin_us_per_msg": _spread(70.0, 75.0, 80.0),
                        "fixed_cores": _spread(0.1, 0.15, 0.2),
                    }
                }
            }
        }
    )
    slope = rows["  sqlite: gateway B's CPU a second over the knee's steps, per message more (slope, us)"]
    assert slope["measured"]["median"] == 75.0
    fixed = rows["  sqlite: gateway B's part that does not grow with the rate (intercept, cores)"]
    assert fixed["measured"]["median"] == 0.15
    assert rows["  sqlite: gateway A's part that does not grow with the rate (intercept, cores)"][
        "measured"
    ] is None


def test_a_row_beside_another_is_printed_without_met_a_row_with_a_target_with_it() -> None:
    """Only a row with a target can read ``met``: a floor or a figure beside another row
    (target in parentheses) is printed with its figures and nothing after them."""
    from bench.bench_hotpath import printed

    figures = {"min": 1.0, "median": 2.0, "max": 3.0}
    beside = {"row": "runs per REPLY", "target": "(beside it)", "measured": figures, "met": True}
    target = {"row": "knee", "target": ">= 2000", "measured": figures, "met": True}
    missed = {**target, "met": False}
    assert printed(beside).rstrip().endswith("1.0 / 2.0 / 3.0")
    assert printed(target).endswith("met")
    assert not printed(missed).rstrip().endswith("met")


def test_the_broker_warm_up_stops_once_its_cpu_per_record_stops_falling() -> None:
    """A fresh broker's bare hop cost 3,068 then 2,110 then 1,082 then 940 µs a record: the
    warm-up goes on while a round costs under 0.8 of the last, never stops after one round."""
    from bench.broker import settled

    assert not settled([3068.0])  # one round says nothing about the next
    assert not settled([3068.0, 2110.0])  # still falling by a third
    assert not settled([3068.0, 2110.0, 1082.0])
    assert settled([3068.0, 2110.0, 1082.0, 940.0])  # 0.87 of the round before: settled
    assert settled([900.0, 1000.0])  # noise upward is settled too
