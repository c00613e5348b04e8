"""Gateway CPU per message, per message kind: the headline figures of the hot path.

Each run starts two gateways (:mod:`bench.latency`) and offers, at one fixed rate, first a
**REPLY phase** (every send a REPLY into ``main-b``: A commits and produces it, B verifies and
holds it) and then a **brief phase** (every send a brief to ``worker-b``'s ``command`` injector:
A commits and produces it and holds the ``INJECTED`` receipt that comes back; B verifies, claims,
commits its offset, injects -- a fork of ``true`` per brief today, counted in B through the
children it reaps -- and sends the receipt). Per phase and process: CPU seconds from ``/proc``
over the window (the drain of any backlog included) divided by the messages committed. On
PostgreSQL the server (postmaster and backends) is a process of its own, reported beside.

Before the phases each process's CPU at rest is read for :data:`IDLE_S` (presence heartbeats,
polling loops); ``<process>_of_which_idle_us_per_msg`` is that rate over a phase's window per
message: the part of the figure the process pays whether messages flow or not.

With ``loaded_rate`` the same two phases run again, on the same gateways and stores, at that
rate (:data:`LOADED_RATE`, the knee's target): a gateway's CPU per message there is mostly what
a message itself costs, where at :data:`RATE` most of it is what its threads cost a second
whatever the rate (docs/performance.md, "The knee's split"). Its summary is ``summary_loaded``.
"""

from __future__ import annotations

from typing import Any

from . import latency

RATE = 500
LOADED_RATE = 2000  # the knee's target (bench.knee): the rate two cores should carry
KINDS = ("reply", "brief")
PROCESSES = ("gateway_A", "gateway_B", "postgresql", "broker")
IDLE_S = 3.0  # the processes at rest, after the warm-up: what a phase's window pays regardless


def idle_us_per_msg(idle_cores: float | None, wall_s: float, messages: int) -> float | None:
    """The part of a phase's µs per message its process would have spent at rest anyway:
    its idle cores over the phase's window, spread over the phase's messages."""
    if idle_cores is None or messages <= 0:
        return None
    return round(idle_cores * wall_s * 1e6 / messages, 1)


def phases(rate: int = RATE) -> tuple[latency.Phase, ...]:
    return tuple((f"{kind}_at_{rate}", rate, kind) for kind in KINDS)


def summarize(runs: list[dict[str, Any]], rate: int = RATE) -> dict[str, Any]:
    """Per kind and process, min / median / max of µs per message over the runs that measured
    it, and of the messages not arrived (a phase whose messages did not all arrive is not a
    clean figure: the row beside it says so)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        got = [r[f"{kind}_at_{rate}"] for r in runs if f"{kind}_at_{rate}" in r]
        if not got:
            continue
        row: dict[str, Any] = {"runs": len(got)}
        for name in PROCESSES:
            values = [g["cpu_us_per_msg"][name] for g in got if g["cpu_us_per_msg"].get(name)]
            if values:
                row[f"{name}_us_per_msg"] = latency.spread(values)
            idle = [
                v
                for r in runs
                if f"{kind}_at_{rate}" in r
                and (v := _idle_part(r.get("idle", {}), r[f"{kind}_at_{rate}"], name)) is not None
            ]
            if idle:  # already inside the figure above: read it as "of which at rest"
                row[f"{name}_of_which_idle_us_per_msg"] = latency.spread(idle)
        for name in PROCESSES:  # which thread of the gateway spent it
            by_thread = [g.get("cpu_us_per_msg_by_thread", {}).get(name) or {} for g in got]
            roles = sorted({r for d in by_thread for r in d})
            spreads = {
                r: latency.spread(v)
                for r in roles
                if (v := [d[r] for d in by_thread if d.get(r) is not None])
            }
            if spreads:
                row[f"{name}_by_thread_us_per_msg"] = spreads
        for name in ("gateway_A", "gateway_B"):  # how often its threads ran, and waited to
            for key, figure in (("runs", "runs_per_msg"), ("runqueue_ms", "runqueue_us_per_msg")):
                values = [v for g in got if (v := _per_msg(g, f"{name}_{key}_per_s")) is not None]
                if values:
                    row[f"{name}_{figure}"] = latency.spread(
                        [
                            round(v * 1000, 1) if key == "runqueue_ms" else round(v, 2)
                            for v in values
                        ]
                    )
            # the interpreter's threads alone (librdkafka's C threads left out): the runs that
            # pay the machine's wake tax for Python code and data (bench_hotpath's estimate)
            ours = [v for g in got if (v := interpreter_runs_per_msg(g, name)) is not None]
            if ours:
                row[f"{name}_interpreter_runs_per_msg"] = latency.spread(
                    [round(v, 2) for v in ours]
                )
        row["not_arrived"] = latency.spread([latency._not_arrived(g) for g in got])
        # whether the phase kept up with its rate: a phase that ran behind drained a backlog in
        # large batches, so its µs per message is not the cost at this rate
        journey = "send_to_held_ms" if kind == "reply" else "send_to_injected_ms"
        p99 = [g[journey]["p99"] for g in got if g[journey].get("p99") is not None]
        if p99:
            row["p99_ms"] = latency.spread(p99)
        row["machine_busy"] = latency.spread([g["cpu"].get("machine_busy", 0.0) for g in got])
        out[kind] = row
    return out


def _messages(phase: dict[str, Any]) -> int:
    """The messages a phase measured: its REPLYs and its briefs."""
    return int(phase["send_to_held_ms"]["of"] + phase["send_to_injected_ms"]["of"])


def _per_msg(phase: dict[str, Any], key: str) -> float | None:
    """A per-second figure of the phase's CPU window (``phase["cpu"][key]``) per message."""
    return _over_messages(phase, phase["cpu"].get(key))


def _over_messages(phase: dict[str, Any], per_s: float | None) -> float | None:
    """``per_s`` over the phase's CPU window, per message it measured."""
    messages, wall = _messages(phase), phase["cpu"].get("wall_s", 0.0)
    return None if per_s is None or not messages else float(per_s) * wall / messages


def interpreter_runs_per_msg(phase: dict[str, Any], name: str) -> float | None:
    """How many times a gateway's own threads (every role but ``librdkafka``) were put on a CPU
    per message of the phase."""
    by_role = phase["cpu"].get(f"{name}_threads_runs_per_s")
    if not by_role:
        return None
    return _over_messages(phase, sum(n for role, n in by_role.items() if role != "librdkafka"))


def _idle_part(idle: dict[str, Any], phase: dict[str, Any], name: str) -> float | None:
    wall = phase["cpu"].get("wall_s", 0.0)
    return idle_us_per_msg(idle.get(f"{name}_cores"), wall, _messages(phase))


def repeats(
    bootstrap: str,
    *,
    store: str,
    n: int,
    seconds: float,
    rate: int = RATE,
    loaded_rate: int | None = None,
    injector: str = "one-shot",
) -> dict[str, Any]:
    """``n`` runs of the two phases on fresh stores (then again at ``loaded_rate``, same run);
    the summary and every run's figures."""
    runs = []
    offered = phases(rate) + (phases(loaded_rate) if loaded_rate else ())
    stores = latency.Stores(store)
    try:
        for _ in range(n):
            urls, server = stores.next()
            runs.append(
                latency.run_once(
                    bootstrap,
                    phases=offered,
                    seconds=seconds,
                    store_urls=urls,
                    floor=False,
                    server_pid=server,
                    idle_s=IDLE_S,
                    injector=injector,
                )
            )
    finally:
        stores.close()
    out: dict[str, Any] = {
        "store": store,
        "rate": rate,
        "injector": injector,
        "summary": summarize(runs, rate),
    }
    if loaded_rate:
        out["loaded_rate"] = loaded_rate
        out["summary_loaded"] = summarize(runs, loaded_rate)
    out["runs"] = _lean(runs)
    return out


def _lean(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs without their log tails unless they failed (the JSON stays readable)."""
    return [r if "error" in r else {k: v for k, v in r.items() if k != "logs"} for r in runs]
