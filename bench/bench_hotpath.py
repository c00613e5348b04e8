"""The hot-path table in one run: every row, three repeats, each beside its baseline.

``python -m bench hotpath`` (``--quick``: one short repeat of each, for a smoke run). Each row is
measured by the bench that owns it, in this one process and this one window:

* gateway CPU per message, per gateway and per kind (a REPLY phase, a brief phase) at 500 msg/s,
  SQLite and PostgreSQL, the PostgreSQL server's own CPU beside (:mod:`bench.cpu_per_kind`),
  and on SQLite again at the knee's target of 2,000 msg/s, same gateways, with the floor under
  it: one envelope's sign + verify, one Kafka produce and consume, one store insert, each
  alone, and their sum (:mod:`bench.cpu_floor`); and B's REPLY path in process on a
  store already holding a retention's worth of rows, time-ordered msgIds and random ones, on
  SQLite and on PostgreSQL with the server's CPU and WAL beside
  (:func:`bench.bench_reply_path.steady_store`);
* the knee: the highest offered rate with send -> held p99 within 50 ms (:mod:`bench.knee`);
* send -> held p99 and send -> INJECTED p99 at 500 msg/s offered, two gateways as processes,
  SQLite and PostgreSQL (:mod:`bench.latency`), each run followed by the bare Kafka hops at the
  same rate (:mod:`bench.kafka_floor`): the floor no pipeline on this broker can go under;
* one sender offering 2,500 msg/s through its gateway's socket: what the gateway committed
  (offered above the 2,000 target, so the row shows the gateway's rate, not the offer's);
* the consume runtime vs the hand loop and vs faststream, and the signed / MAC'd pull path
  (:mod:`bench.bench_runtime`); the crypto floor per core (:mod:`bench.bench_envelope`);
* the outbox relay vs a raw producer, and broker-down vs broker-up run latency
  (:mod:`bench.bench_outbox`, which starts and stops its own broker);
* one ``fleet send`` process (:mod:`bench.bench_cli`).

The ``table`` it returns has one line per row: target, min / median / max, and whether every
repeat met it. A section that fails reports its error; the others keep their figures.
``BENCH_SECTIONS=cpu_sqlite,floor`` runs only the sections named (the others read not measured).
``BENCH_TRACING=1`` runs every gateway with OpenTelemetry tracing on, exporting to an OTLP/HTTP
receiver on loopback (:func:`_tracing`); without it tracing is off, as by default: the pair of runs
is tracing's cost (docs/observability.md, "Tracing").
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from pipeline.envelope.ed25519 import VERIFIER

from . import (
    bench_cli,
    bench_envelope,
    bench_outbox,
    bench_reply_path,
    bench_runtime,
    cpu_floor,
    cpu_per_kind,
    knee,
    latency,
)
from .broker import append_linger_ms, kafka, warm_up

# send -> held p99 and send -> INJECTED p99 at 500 msg/s, ms, per store (the targets)
LATENCY_TARGET_MS = {"sqlite": (10.0, 25.0), "postgresql": (15.0, 40.0)}
PG_LATENCY_FACTOR = 1.5  # PostgreSQL's latency rows within this many times SQLite's
SENDER_RATE = 2500  # offered: above the 2,000 msg/s target, so a pacing hiccup cannot decide it
# gateway CPU per message on SQLite, µs; PostgreSQL's targets are PG_FACTOR times these
CPU_TARGET_US = {"reply": 350, "brief": 500}
PG_FACTOR = 1.5
FLOOR_ROWS = 2000  # envelopes signed and verified, store rows inserted, per floor part


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _row(
    what: str, target: str, ok: Callable[[float], bool], spread: dict[str, float] | None
) -> dict[str, Any]:
    if not spread:
        return {"row": what, "target": target, "measured": None, "met": False}
    values = [spread["min"], spread["median"], spread["max"]]
    return {
        "row": what,
        "target": target,
        "measured": {k: round(v, 3) for k, v in spread.items()},
        "met": all(ok(v) for v in values),
    }


def _get(d: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _one(value: float | None) -> dict[str, float] | None:
    """A single figure as a spread (benches that measure it once per run)."""
    return None if value is None else {"min": value, "median": value, "max": value}


# A CPU phase whose p99 exceeds this ran behind its rate (a backlog drained in large batches):
# its µs per message is not the cost at that rate, so its CPU rows do not count as met.
KEPT_UP_P99_MS = 1000.0


def over_floor(spread: dict[str, float] | None, floor: float | None) -> dict[str, float] | None:
    """A CPU row's repeats over its floor of the same run: what a slower or faster machine
    moves in both cancels out, so runs on different days compare (docs/performance.md)."""
    if not spread or not floor:
        return None
    return {k: spread[k] / floor for k in ("min", "median", "max")}


def _p99_within(phase: dict[str, Any], limit_ms: float) -> bool:
    """Every repeat of a CPU phase kept its p99 within ``limit_ms`` (a phase without one did
    not: its figure is no rate's)."""
    p99 = phase.get("p99_ms")
    return bool(p99) and p99["max"] <= limit_ms


def _cpu_row(
    what: str, target: str, limit: float, within: bool, spread: dict[str, float] | None
) -> dict[str, Any]:
    """A gateway's CPU row: met when every repeat is within ``limit`` µs and its phase kept its
    p99 within the row's bound (``within``)."""
    return _row(what, target, lambda v: within and v <= limit, spread)


def _at_most(limit: float) -> Callable[[float], bool]:
    return lambda v: v <= limit


def _baseline(what: str, spread: dict[str, float] | None) -> dict[str, Any]:
    return _row(what, "(floor)", lambda v: True, spread)


# the threads that carry each gateway's share (their names in the kernel, cut to 15 bytes;
# bench/cpu.py): A commits sends and holds receipts, B holds REPLYs and injects briefs
THREAD_ROLES = {
    "A": ("gw-socket-reade", "gw-relay", "gw-inbox", "librdkafka"),
    "B": ("gw-inbox", "inject-worker", "gw-relay", "librdkafka"),
}


def cpu_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    """Gateway CPU µs per message per kind and store, the floor beside them."""
    rows = []
    for store in ("sqlite", "postgresql"):
        factor = PG_FACTOR if store == "postgresql" else 1.0
        summary = _get(out, f"cpu_{store}", "summary") or {}
        for kind, label in (("reply", "REPLY"), ("brief", "brief")):
            at = summary.get(kind) or {}
            limit = CPU_TARGET_US[kind] * factor
            kept_up = _p99_within(at, KEPT_UP_P99_MS)
            for gw in ("A", "B"):
                rows.append(
                    _cpu_row(
                        f"gateway {gw} CPU per {label} at 500 msg/s, {store} (us)",
                        f"<= {limit:g}, at rate",
                        limit,
                        kept_up,
                        at.get(f"gateway_{gw}_us_per_msg"),
                    )
                )
                rows.append(
                    _row(
                        f"  of which gateway {gw} at rest (its idle CPU over the window, us)",
                        "(inside it)",
                        lambda v: True,
                        at.get(f"gateway_{gw}_of_which_idle_us_per_msg"),
                    )
                )
                floor = _get(out, "floor", f"path_{store}", f"{gw}_{kind}_us")
                rows.append(
                    _baseline(
                        f"  gateway {gw}'s floor per {label}: its share of the floor parts (us)",
                        _one(floor),
                    )
                )
                rows.append(
                    _row(
                        f"  gateway {gw} per {label} over its floor, {store}, same run (x)",
                        "(beside it)",
                        lambda v: True,
                        over_floor(at.get(f"gateway_{gw}_us_per_msg"), floor),
                    )
                )
                threads = at.get(f"gateway_{gw}_by_thread_us_per_msg") or {}
                for role in THREAD_ROLES[gw]:
                    rows.append(
                        _row(
                            f"    of which its thread {role} (us)",
                            "(inside it)",
                            lambda v: True,
                            threads.get(role),
                        )
                    )
                rows.append(
                    _row(
                        f"    gateway {gw}'s threads put on a CPU per {label}, {store} (wakes, "
                        "returns after preemption)",
                        "(beside it)",
                        lambda v: True,
                        at.get(f"gateway_{gw}_runs_per_msg"),
                    )
                )
                rows += wake_estimate_rows(
                    at.get(f"gateway_{gw}_us_per_msg"),
                    at.get(f"gateway_{gw}_interpreter_runs_per_msg"),
                    _get(out, "floor", "wake", "after_2ms_extra_us"),
                    f"gateway {gw}",
                    label,
                )
                rows.append(
                    _row(
                        f"    gateway {gw}'s threads' wait for a core per {label}, {store} (us)",
                        "(beside it)",
                        lambda v: True,
                        at.get(f"gateway_{gw}_runqueue_us_per_msg"),
                    )
                )
            rows.append(
                _row(
                    f"  broker CPU per {label}, same phase (us; its floor below)",
                    "(beside it)",
                    lambda v: True,
                    at.get("broker_us_per_msg"),
                )
            )
            if store == "postgresql":
                rows.append(
                    _row(
                        f"  PostgreSQL server CPU per {label}, same phase (us)",
                        "(beside it)",
                        lambda v: True,
                        at.get("postgresql_us_per_msg"),
                    )
                )
            journey = "held" if kind == "reply" else "INJECTED"
            rows.append(
                _row(
                    f"  {label} phase, {store}: kept up, send -> {journey} p99 (ms)",
                    f"<= {KEPT_UP_P99_MS:g}",
                    _at_most(KEPT_UP_P99_MS),
                    at.get("p99_ms"),
                )
            )
            rows.append(
                _row(
                    f"  {label} phase, {store}: sent, never held or receipted within 60 s",
                    "0",
                    lambda v: v == 0,
                    at.get("not_arrived"),
                )
            )
        rows += loaded_cpu_rows(out, store)
    fl = out.get("floor") or {}
    rows += [_baseline(label, _one(_get(fl, part, key))) for label, part, key in _FLOOR_PARTS]
    rows += [
        _baseline(
            f"  floor: PostgreSQL per row, {cpu_floor.BATCH} a transaction, client + server (us)",
            _one(
                _add(
                    _get(fl, "postgresql", "batched_us_per_row"),
                    _get(fl, "postgresql", "server_batched_us_per_row"),
                )
            ),
        ),
        _baseline(
            "  floor sum, SQLite: crypto + produce + consume + insert (us CPU)",
            _one(fl.get("sum_sqlite_us")),
        ),
        _baseline(
            "  floor sum, PostgreSQL: the same, insert client + server (us CPU)",
            _one(fl.get("sum_postgresql_us")),
        ),
    ]
    rows += [_baseline(label, _one(_get(fl, part, key))) for label, part, key in _MACHINE_PARTS]
    return rows + store_key_rows(out)


def wake_estimate_rows(
    cpu: dict[str, float] | None,
    runs: dict[str, float] | None,
    extra_us: float | None,
    who: str,
    label: str,
) -> list[dict[str, Any]]:
    """What the host charges a gateway per message for waking, estimated in the run: its own
    threads' runs per message (librdkafka's C threads left out: a run of theirs costs 18-60 µs
    in all here, about the interpreter's extra, so charging them that would count a whole run
    as tax) times the machine's extra CPU for a run of interpreter work after 2 ms asleep (the
    floor's ``wake``; a gap between messages at 500 msg/s); and the CPU row's median less that
    estimate's median, what a message would cost it on a host that charged nothing for a
    pause."""
    if not runs or extra_us is None:
        return []
    charged = {k: round(runs[k] * extra_us, 1) for k in ("min", "median", "max")}
    rows = [
        _row(
            f"    of which, estimated, waking: its own threads' runs per {label} x the "
            "machine's extra after 2 ms asleep (us)",
            "(inside it)",
            lambda v: True,
            charged,
        )
    ]
    if cpu:
        rows.append(
            _row(
                f"    {who} per {label} less that estimate, medians (us)",
                "(beside it)",
                lambda v: True,
                _one(round(cpu["median"] - charged["median"], 1)),
            )
        )
    return rows


def loaded_cpu_rows(out: dict[str, Any], store: str) -> list[dict[str, Any]]:
    """The CPU rows again at the knee's target rate, same gateways, same run (cpu_per_kind's
    ``loaded_rate``): the cost of a message where it is not spread over a gateway's cost a
    second. A row counts as met only if its phase stayed within the knee's p99 limit: past the
    knee a backlog drains in large batches and the figure is not the path's at that rate."""
    section = out.get(f"cpu_{store}") or {}
    loaded, rate = section.get("summary_loaded"), section.get("loaded_rate")
    if not loaded or not rate:
        return []
    factor = PG_FACTOR if store == "postgresql" else 1.0
    rows = []
    for kind, label in (("reply", "REPLY"), ("brief", "brief")):
        at = loaded.get(kind) or {}
        limit = CPU_TARGET_US[kind] * factor
        within = _p99_within(at, knee.LIMIT_MS)
        for gw in ("A", "B"):
            rows.append(
                _cpu_row(
                    f"gateway {gw} CPU per {label} at {rate:,} msg/s, {store} (us)",
                    f"<= {limit:g}, p99 <= {knee.LIMIT_MS:g} ms",
                    limit,
                    within,
                    at.get(f"gateway_{gw}_us_per_msg"),
                )
            )
            rows.append(
                _row(
                    f"    gateway {gw}'s threads put on a CPU per {label} at {rate:,} msg/s",
                    "(beside it)",
                    lambda v: True,
                    at.get(f"gateway_{gw}_runs_per_msg"),
                )
            )
        journey = "held" if kind == "reply" else "INJECTED"
        rows.append(
            _row(
                f"  {label} phase at {rate:,} msg/s, {store}: send -> {journey} p99 (ms)",
                f"<= {knee.LIMIT_MS:g}",
                _at_most(knee.LIMIT_MS),
                at.get("p99_ms"),
            )
        )
        rows.append(
            _row(
                f"  {label} phase at {rate:,} msg/s, {store}: sent, never held or receipted",
                "0",
                lambda v: v == 0,
                at.get("not_arrived"),
            )
        )
    return rows


def store_key_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    """B's REPLY path in process on a store some way into its retention (bench_reply_path's
    ``steady_store``): msgIds as minted (time-ordered), and random ones over them; on
    PostgreSQL the server's CPU and WAL per REPLY too."""
    sk = out.get("store_keys") or {}
    pg = out.get("store_keys_postgresql") or {}
    n = sk.get("prefill", pg.get("prefill", bench_reply_path.PREFILL))
    beside = ("(beside it)", lambda v: True)
    return [
        _row(f"B's REPLY path in process, store already holding {n:,} rows, msgIds as minted (us)",
             *beside, sk.get("minted_cpu_us")),
        _row("  the same with random msgIds (version 4, as minted before), over minted (x)",
             *beside, sk.get("random_over_minted")),
        _row("  the same on PostgreSQL, the client, msgIds as minted (us)",
             *beside, pg.get("minted_cpu_us")),
        _row("    random over minted: the client (x)", *beside, pg.get("random_over_minted")),
        _row("    the server's CPU per REPLY, msgIds as minted (us)",
             *beside, pg.get("minted_server_us")),
        _row("    random over minted: the server's CPU (x)",
             *beside, pg.get("random_over_minted_server")),
        _row("    the WAL the server wrote per REPLY, msgIds as minted (bytes)",
             *beside, pg.get("minted_wal_bytes")),
        _row("    random over minted: the WAL (x)", *beside, pg.get("random_over_minted_wal")),
    ]  # fmt: skip


# the floor's parts as rows: (label, part of ``cpu_floor.measure``, its key)
_FLOOR_PARTS = (
    ("  floor: sign + verify one envelope (us CPU)", "crypto", "sign_and_verify_us"),
    ("  floor: one Kafka produce, paced at 500 msg/s (us CPU)", "kafka", "produce_us_per_msg"),
    ("  floor: one Kafka consume, paced at 500 msg/s (us CPU)", "kafka", "consume_us_per_msg"),
    (
        "  floor: the broker per bare record, produced and consumed at 500 msg/s (us CPU)",
        "kafka",
        "broker_us_per_msg",
    ),
    ("  floor: one SQLite insert + commit (us CPU)", "sqlite", "single_us"),
    (
        f"  floor: the same per row, {cpu_floor.BATCH} rows a transaction (us CPU)",
        "sqlite",
        "batched_us_per_row",
    ),
    ("  floor: one PostgreSQL insert + commit, client (us CPU)", "postgresql", "single_us"),
    ("  floor: the same, the server's backend (us CPU)", "postgresql", "server_single_us"),
)
# what this machine charges for a page touched again (cpu_floor.page_retouch) ...
_MACHINE_PARTS = (
    ("  the machine: one 4 KiB page read again at once (us CPU)", "pages", "hot_us_per_page"),
    (
        "  the machine: the same after 2 ms asleep (us CPU; a gap at 500 msg/s)",
        "pages",
        "after_2ms_us_per_page",
    ),
    (
        "  the machine: the same after 0.5 s asleep (us CPU)",
        "pages",
        "after_500ms_us_per_page",
    ),
    # ... and a thread for a run of its code after a pause (cpu_floor.wake_tax)
    (
        "  the machine: a run of ~50 us of interpreter work, at speed (us CPU)",
        "wake",
        "after_2ms_at_speed_us",
    ),
    (
        "  the machine: that run's extra CPU the first time after 0.5 ms asleep (us)",
        "wake",
        "after_0_5ms_extra_us",
    ),
    (
        "  the machine: the same after 2 ms asleep (us; a gap at 500 msg/s)",
        "wake",
        "after_2ms_extra_us",
    ),
    ("  the machine: the same after 10 ms asleep (us)", "wake", "after_10ms_extra_us"),
)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a + b, 1)


def pg_over_sqlite_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The latency rows on PostgreSQL over the same rows on SQLite, median over median (the
    two stores run in separate phases of one run)."""
    rows = []
    for key, journey in (("send_to_held_p99_ms", "held"), ("send_to_injected_p99_ms", "INJECTED")):
        pg = _get(out, "latency_postgresql", "summary", "at_500", key, "median")
        lite = _get(out, "latency_sqlite", "summary", "at_500", key, "median")
        ratio = round(pg / lite, 3) if pg and lite else None
        rows.append(
            _row(
                f"send -> {journey} p99 at 500 msg/s, postgresql / sqlite, medians (x)",
                f"<= {PG_LATENCY_FACTOR:g}",
                _at_most(PG_LATENCY_FACTOR),
                _one(ratio),
            )
        )
    return rows


def knee_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for store, others in (("sqlite", "broker"), ("postgresql", "broker + PostgreSQL server")):
        rows += [
            _row(
                f"knee: highest offered rate with send -> held p99 <= {knee.LIMIT_MS:g} ms, "
                f"{store} (msg/s)",
                ">= 2000",
                lambda v: v >= 2000,
                _get(out, f"knee_{store}", "knee_msg_per_s"),
            ),
            _row(
                f"  {store}: the first step past the knee, machine busy (share of all cores)",
                "(beside it)",
                lambda v: True,
                _get(out, f"knee_{store}", "past_the_knee", "machine_busy"),
            ),
            _row(
                f"  {store}: the same step, CPU per message: gateways + {others} + sender (us)",
                "(beside it)",
                lambda v: True,
                _get(out, f"knee_{store}", "past_the_knee", "all_us_per_msg"),
            ),
            _row(
                f"    of which {others} + sender, not the gateways, {store} (us)",
                "(inside it)",
                lambda v: True,
                _get(out, f"knee_{store}", "past_the_knee", "not_gateways_us_per_msg"),
            ),
        ]
        for gateway in knee.GATEWAYS:
            split = _get(out, f"knee_{store}", "rate_split", gateway) or {}
            label = gateway.replace("_", " ")
            rows += [
                _row(
                    f"  {store}: {label}'s CPU a second over the knee's steps, per message more "
                    "(slope, us)",
                    "(beside it)",
                    lambda v: True,
                    split.get("margin_us_per_msg"),
                ),
                _row(
                    f"  {store}: {label}'s part that does not grow with the rate (intercept, "
                    "cores)",
                    "(beside it)",
                    lambda v: True,
                    split.get("fixed_cores"),
                ),
            ]
    return rows


def table(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's rows from the sections' figures (a missing section: ``measured: None``)."""
    rows = cpu_rows(out)
    for store in ("sqlite", "postgresql"):
        at = _get(out, f"latency_{store}", "summary", "at_500") or {}
        held_ms, injected_ms = LATENCY_TARGET_MS[store]
        rows += [
            _row(
                f"send -> held p99 at 500 msg/s, {store} (ms)",
                f"<= {held_ms:g}",
                _at_most(held_ms),
                at.get("send_to_held_p99_ms"),
            ),
            _row(
                "  bare Kafka hop p99 at 500 msg/s, same run (ms): the floor under it",
                "(baseline)",
                lambda v: True,
                at.get("floor_one_hop_p99_ms"),
            ),
            _row(
                f"send -> INJECTED p99 at 500 msg/s, {store} (ms)",
                f"<= {injected_ms:g}",
                _at_most(injected_ms),
                at.get("send_to_injected_p99_ms"),
            ),
            _row(
                "  bare Kafka round trip p99, same run (ms): the floor under it",
                "(baseline)",
                lambda v: True,
                at.get("floor_round_trip_p99_ms"),
            ),
            _row(
                "  machine CPU busy while it ran and drained (share of all cores)",
                "(beside it)",
                lambda v: True,
                at.get("machine_busy"),
            ),
            _row(
                f"  sent at 500 msg/s, {store}, never held or receipted within 60 s",
                "0",
                lambda v: v == 0,
                at.get("not_arrived"),
            ),
        ]
    rows += pg_over_sqlite_rows(out)
    rows += knee_rows(out)
    rows.append(
        _row(
            "one sender offering 2,500 msg/s: committed by its gateway (msg/s)",
            ">= 2000",
            lambda v: v >= 2000,
            _get(out, "sender", "summary", "at_2500", "committed_msg_per_s"),
        )
    )
    rows.append(
        _row(
            "  of them never held within 60 s",
            "0",
            lambda v: v == 0,
            _get(out, "sender", "summary", "at_2500", "not_arrived"),
        )
    )
    rt = out.get("runtime") or {}
    rows += [
        _row(
            "consume runtime / hand loop, wall",
            ">= 0.85",
            lambda v: v >= 0.85,
            rt.get("runtime_over_hand"),
        ),
        _row(
            "consume runtime / faststream, wall",
            "(its ratio below)",
            lambda v: True,
            rt.get("runtime_over_faststream"),
        ),
        _row(
            "  the same over its ceiling (= runtime / hand_async, same repeat)",
            ">= 0.9",
            lambda v: v >= 0.9,
            rt.get("runtime_over_hand_async"),
        ),
        _row(
            "  ceiling: faststream / hand_async, wall (a runtime costing nothing)",
            "(baseline)",
            lambda v: True,
            rt.get("faststream_over_hand_async"),
        ),
        _row(
            "signed pull, 2 threads (msg/s)",
            "(its ratio below)",
            lambda v: True,
            rt.get("signed_pull_2threads_msg_per_s"),
        ),
        _row(
            "  the same / Ed25519 verify alone on 1 core (the fabric's verifier), same repeat",
            ">= 1.2",
            lambda v: v >= 1.2,
            rt.get("signed_pull_2threads_over_verify_alone"),
        ),
        _row(
            "  the same / libsodium's verify alone (the verifier without the native module)",
            "(beside)",
            lambda v: True,
            rt.get("signed_pull_2threads_over_libsodium_verify_alone"),
        ),
        _row(
            "  the same / OpenSSL's Ed25519 verify alone (the library before 0.13)",
            "(beside)",
            lambda v: True,
            rt.get("signed_pull_2threads_over_openssl_verify_alone"),
        ),
        _row(
            "MAC'd pull (pairwise_mac), 2 threads (msg/s)",
            ">= 10000",
            lambda v: v >= 10_000,
            rt.get("mac_pull_2threads_msg_per_s"),
        ),
        _row(
            "  Ed25519 verify alone, 1 core (msg/s): the crypto floor",
            "(baseline)",
            lambda v: True,
            _one(_get(out, "envelope", "raw_ed25519_verify_per_s")),
        ),
    ]
    ob = out.get("outbox") or {}
    rows += [
        _row(
            "outbox relay / raw idempotent producer, wall",
            ">= 0.8",
            lambda v: v >= 0.8,
            _get(ob, "throughput", "relay_vs_raw_per_round"),
        ),
        _row(
            "  the same, process CPU",
            "(beside it)",
            lambda v: True,
            _get(ob, "throughput", "relay_vs_raw_cpu_per_round"),
        ),
        _row(
            "  ceiling: raw CPU / (raw CPU + the relay's read and ack alone)",
            "(baseline)",
            lambda v: True,
            _get(ob, "throughput", "bound_by_read_and_ack_cpu_per_round"),
        ),
        _row(
            "broker-down / broker-up run latency",
            "<= 1.1 every run",
            lambda v: v <= 1.1,
            _get(ob, "latency", "down_vs_up_per_round"),
        ),
    ]
    cli = out.get("cli") or {}
    rows += [
        _row(
            "one `fleet send` process through the gateway, wall (s)",
            "<= 0.15",
            lambda v: v <= 0.15,
            _get(cli, "fleet send (gateway socket)", "s"),
        ),
        _row(
            "one `fleet --help` process, wall (s)",
            "<= 0.15",
            lambda v: v <= 0.15,
            _get(cli, "fleet --help", "s"),
        ),
        _row(
            "  `python -c pass`, wall (s): the interpreter's floor",
            "(baseline)",
            lambda v: True,
            _get(cli, "baseline_python_s", "s"),
        ),
    ]
    return rows


# worker-b's command injector in every latency, CPU and knee phase: the long-lived mode (one child
# fed framed briefs, docs/injectors.md), the way a host under load runs briefs; its child's CPU is
# counted against gateway B. `python -m bench.latency` alone keeps `true` per brief by default.
INJECTOR = "long-lived"


@contextlib.contextmanager
def _tracing(out: dict[str, Any]) -> Iterator[None]:
    """``BENCH_TRACING=1``: every gateway the bench starts exports its spans over OTLP/HTTP to a
    receiver on loopback (the ``OTEL_*`` variables the gateways inherit); the run's JSON says
    ``tracing: on`` and how many spans arrived. Unset: tracing off, as a gateway runs by default."""
    if os.environ.get("BENCH_TRACING", "") not in ("1", "true", "on"):
        out["tracing"] = "off"
        yield
        return
    from pipeline.testing.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver().start()
    saved = {k: os.environ.get(k) for k in _OTEL}
    os.environ.update(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    )
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        out["tracing"] = {"on": True, "spans_received": len(receiver.spans())}
        receiver.stop()


_OTEL = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT")


def main(quick: bool = False) -> dict[str, Any]:
    reps, seconds = (1, 4.0) if quick else (3, 10.0)
    step_s = seconds / 2  # each of the knee's steps
    sections: dict[str, Callable[[], Any]] = {
        "latency_sqlite": lambda: latency.repeats(
            bootstrap,
            sender="socket",
            store="sqlite",
            n=reps,
            seconds=seconds,
            rates=(500,),
            injector=INJECTOR,
        ),
        "latency_postgresql": lambda: latency.repeats(
            bootstrap,
            sender="socket",
            store="postgresql",
            n=reps,
            seconds=seconds,
            rates=(500,),
            injector=INJECTOR,
        ),
        "cpu_sqlite": lambda: cpu_per_kind.repeats(
            bootstrap,
            store="sqlite",
            n=reps,
            seconds=seconds,
            loaded_rate=cpu_per_kind.LOADED_RATE,
            injector=INJECTOR,
        ),
        "cpu_postgresql": lambda: cpu_per_kind.repeats(
            bootstrap, store="postgresql", n=reps, seconds=seconds, injector=INJECTOR
        ),
        "floor": lambda: cpu_floor.measure(
            bootstrap, rate=cpu_per_kind.RATE, seconds=seconds, rows=FLOOR_ROWS
        ),
        "store_keys": lambda: bench_reply_path.steady_store(
            prefill=bench_reply_path.PREFILL // 10 if quick else bench_reply_path.PREFILL,
            replies=1000 if quick else 3000,
            repeats=reps,
        ),
        "store_keys_postgresql": lambda: bench_reply_path.steady_store(
            prefill=bench_reply_path.PREFILL // 10 if quick else bench_reply_path.PREFILL,
            replies=1000 if quick else 3000,
            repeats=reps,
            postgresql=True,
        ),
        "knee_sqlite": lambda: knee.repeats(
            bootstrap, store="sqlite", n=reps, seconds=step_s, injector=INJECTOR
        ),
        "knee_postgresql": lambda: knee.repeats(
            bootstrap, store="postgresql", n=reps, seconds=step_s, injector=INJECTOR
        ),
        "sender": lambda: latency.repeats(
            bootstrap,
            sender="socket",
            store="sqlite",
            n=reps,
            seconds=seconds / 2,
            rates=(SENDER_RATE,),
            floor=False,
            briefs_too=False,
        ),
        "runtime": lambda: bench_runtime.main(quick),
        "envelope": lambda: bench_envelope.main(quick),
        "outbox": lambda: bench_outbox.main(quick),
        "cli": lambda: bench_cli.main(quick),
    }
    only = [n for n in os.environ.get("BENCH_SECTIONS", "").split(",") if n]
    if only:  # a subset, for a quick look at one part; the table marks the rest not measured
        sections = {name: run for name, run in sections.items() if name in only}
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    out["ed25519_verifier"] = VERIFIER  # the gateways' too: they run this checkout's install
    with kafka("bench-hotpath") as bootstrap, _tracing(out):
        out["broker_append_linger_ms"] = append_linger_ms(bootstrap)
        # a broker started moments ago runs slow for its first half-minute of traffic: warmed
        # first, so the first section is not read on a colder broker than the others
        out["broker_warm_up"] = warm_up(bootstrap)
        print(json.dumps({"broker_warm_up": out["broker_warm_up"]}), flush=True)
        for name, section in sections.items():
            before = _load()
            t0 = time.monotonic()
            try:
                out[name] = section()
            except Exception as exc:  # noqa: BLE001 - keep what was measured, say what failed
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            out.setdefault("sections", {})[name] = {
                "seconds": round(time.monotonic() - t0, 1),
                "load_before_after": [before, _load()],
            }
            print(json.dumps({name: out["sections"][name]}), flush=True)
    out["table"] = table(out)
    print(f"Ed25519 verify: {VERIFIER} (every gateway and pull path of this run)")
    for line in out["table"]:
        print(printed(line))
    return out


def printed(line: dict[str, Any]) -> str:
    """One table line as printed. ``met`` only beside a target: a row whose target is in
    parentheses (a floor, a baseline, a figure beside another) is read, never met."""
    m = line["measured"]
    fig = "-" if m is None else f"{m['min']} / {m['median']} / {m['max']}"
    mark = "met" if line["met"] and not line["target"].startswith("(") else ""
    return f"{line['row']:<80} {line['target']:>18}  {fig:>28}  {mark}"
