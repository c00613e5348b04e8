"""``fleet lab run``: a scenario on the real broker, observed, then set beside the model.

Order of a run: create the pool topic; start every member and wait until the group has settled
(every partition owned); start the producer (prefilled lag first, then arrivals on schedule);
apply faults at their scenario times (SIGTERM / kill -9 / restart); tick every ``tick_s`` wall
seconds (lag per partition via the project's lag reader, assignment, CPU); stop everything;
analyse; write report.json, report.md and the plots.
"""

from __future__ import annotations

import heapq
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    NewTopic,
    OffsetSpec,
)

from pipeline.errors import ConfigError
from pipeline.kafka.clients import ClientFactory, new_admin, new_consumer
from pipeline.kafka.settings import admin_config
from pipeline.kafka.topics import TopicNames
from pipeline.reasons import Lab
from pipeline.support.processes import spawn_fleet as spawn

from .analysis import analyse
from .arrivals import events
from .assignors import member_ids
from .comparison import Analysis
from .machine import ProcessCpu
from .members import Members
from .model import predict
from .observe import Observer, Tick
from .plots import require_plotting, write_plots
from .report import write_reports
from .scenario import Scenario, StopSignal
from .step_log import Step
from .tick_series import settled

# t = 0 comes this long after the producer is spawned: its imports (1-2 s on a loaded machine)
# must be done by then, since the prefill goes out at t = 0 (pipeline.lab.producer)
START_LEAD_S = 3.0

# bound on ``python -m pipeline pool run --help`` (imports on a loaded machine: seconds)
POOL_PROBE_TIMEOUT_S = 120.0

Progress = Callable[[float, str], None]  # (scenario seconds done, what happens)


# an outage's replacement members are spawned this long (wall) before it ends and join the
# group at its end: a member's start-up (imports, store, connections: 2-15 s of wall time on a
# loaded 2-core machine, 1.7 s of imports alone) is the lab's cost, not the outage's -- the
# model's outage is "members out of the group for d seconds" (docs/lab.md, "The rejoin")
REJOIN_LEAD_S = 20.0

Fault = tuple[float, int, str, str, StopSignal, float]


def _faults(s: Scenario, *, lead_s: float = REJOIN_LEAD_S) -> list[Fault]:
    """(scenario time, order, action, member, signal, join at) -- stops before starts at equal
    times. An outage's replacement starts ``lead_s`` wall seconds before the outage ends (not
    before it began) and joins at its end; a restart's starts and joins at once."""
    ids = member_ids(s.members.count)
    out: list[Fault] = []
    for o in s.outages:
        end = o.at_s + o.duration_s
        spawn = max(o.at_s, end - lead_s / s.time_scale)
        for i in s.stopped(o):
            out.append((o.at_s, 0, "stop", ids[i], o.signal, o.at_s))
            out.append((spawn, 1, "start", ids[i], o.signal, end))
    for r in s.restarts:
        out.append((r.at_s, 0, "stop", ids[r.member], r.signal, r.at_s))
        out.append((r.at_s, 1, "start", ids[r.member], r.signal, r.at_s))
    heapq.heapify(out)
    return out


def _create_topic(
    bootstrap: str, topic: str, partitions: int, admin_factory: ClientFactory
) -> None:
    admin = admin_factory(admin_config(bootstrap))
    # -1: the cluster's default.replication.factor (one broker: 1; min ISR 2 takes acks=all)
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])
    for f in fut.values():
        f.result(timeout=30)
    # a just-created topic's leaders take a moment to answer (NOT_LEADER_FOR_PARTITION from
    # ListOffsets): wait, bounded, until every partition's offsets can be read
    deadline = time.time() + 30
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(topic, p): latest for p in range(partitions)}
    while time.time() < deadline:
        try:
            for f in admin.list_offsets(request, request_timeout=5).values():
                f.result(timeout=10)
            return
        except KafkaException:
            time.sleep(0.2)


def pool_command_available() -> bool:
    """True when this build has ``fleet pool run`` (the members the lab starts). Asked of the
    command itself, started the way the members are (``python -m pipeline pool run --help``):
    the lab does not import the CLI, which sits above it."""
    probe = spawn(["pool", "run", "--help"], env={}, log=Path(os.devnull))
    try:
        return probe.wait(timeout=POOL_PROBE_TIMEOUT_S) == 0
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.wait()
        raise


def require_pool_command() -> None:
    if not pool_command_available():
        raise ConfigError(
            "fleet lab run starts pool members with 'python -m pipeline pool run', which this "
            "build does not have (worker pools); 'fleet lab predict' works without it",
            reason=Lab.LAB_RUN_FAILED,
        )


def _wait_settled(
    s: Scenario, observer: Observer, members: Members, out: Path, tick_s: float, timeout_s: float
) -> None:
    """Every member up and every partition owned, unchanged for two seconds (a group that is
    still joining hands everything to its first member for a moment), before the first event."""
    deadline = time.time() + timeout_s
    same_since, last = time.time(), None
    while True:
        tick = observer.tick(t=0.0, members_up=members.up())
        if tick.assignment != last:
            same_since, last = time.time(), tick.assignment
        if settled(tick, s) and time.time() - same_since >= 2.0:
            return
        if time.time() > deadline or members.died():
            raise ConfigError(
                f"the pool group never settled (members died: {members.died()}); see "
                f"{out}/member-*.log",
                reason=Lab.LAB_RUN_FAILED,
            )
        time.sleep(tick_s)


def read_steps(s: Scenario, out: Path, start: float) -> list[Step]:
    """The members' events logs (``fleet pool run --events``), in scenario seconds. The event id
    is the producer's ``msgId`` (``lab-<seq>``); the scheduled step comes from the same seeded
    arrivals the producer sent."""
    scheduled = {ev.seq: (ev.step_s, ev.poison) for ev in events(s)}
    steps: list[Step] = []
    for path in sorted(out.glob("events-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                seq = int(str(d["event_id"]).removeprefix("lab-"))
            except (json.JSONDecodeError, ValueError, KeyError):
                continue  # a line cut by kill -9, or not one of ours
            if d.get("end_ms") is None:
                continue  # a step's start line; its end line follows unless the member died
            step_s, poison = scheduled.get(seq, (0.0, False))
            steps.append(
                Step(
                    seq=seq,
                    member=str(d["member"]),
                    partition=int(d["partition"]),
                    t0=(d["start_ms"] / 1000.0 - start) / s.time_scale,
                    t1=(d["end_ms"] / 1000.0 - start) / s.time_scale,
                    scheduled_s=step_s,
                    poison=poison,
                    kind=str(d.get("kind", "ran")),
                )
            )
    return steps


def run(
    s: Scenario,
    *,
    source: Path,
    bootstrap: str,
    out: Path,
    tick_s: float = 0.5,
    settle_timeout_s: float = 180.0,  # member start-up on a loaded machine: not measured
    store_url: str | None = None,
    progress: Progress | None = None,
    admin_factory: ClientFactory = new_admin,
    consumer_factory: ClientFactory = new_consumer,
    child_env: dict[str, str] | None = None,
) -> tuple[Analysis, dict[str, Any]]:
    """``admin_factory``/``consumer_factory`` build this process's clients and ``child_env``
    goes to the producer and pool-member processes (``FLEET_KAFKA_CONFIG``: the same login)."""
    require_pool_command()
    require_plotting()
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.toml").write_bytes(source.read_bytes())  # the producer reads this copy
    note = progress or (lambda _t, _what: None)
    pool = f"lab-{uuid.uuid4().hex[:8]}"
    names = TopicNames()
    topic, group = names.pool(pool), names.pool_group(pool)
    _create_topic(bootstrap, topic, s.partitions, admin_factory)
    members = Members(
        scenario=s,
        pool=pool,
        bootstrap=bootstrap,
        out=out,
        store_url=store_url or f"sqlite:///{(out / 'pool.sqlite').resolve()}",
        env=dict(child_env or {}),
    )
    observer = Observer(
        bootstrap=bootstrap,
        group=group,
        topic=topic,
        partitions=s.partitions,
        admin_factory=admin_factory,
        consumer_factory=consumer_factory,
    )
    ticks: list[Tick] = []
    producer = None
    run_cpu = ProcessCpu()
    try:
        for m in member_ids(s.members.count):
            members.start(m)
        note(0.0, "members joining")
        _wait_settled(s, observer, members, out, tick_s, settle_timeout_s)
        start = time.time() + START_LEAD_S
        stats_path = out / "producer.json"
        producer = spawn(
            [
                "lab",
                "produce",
                str(out / "scenario.toml"),
                "--bootstrap",
                bootstrap,
                "--topic",
                topic,
                "--start-at",
                repr(start),
                "--stats",
                str(stats_path),
            ],
            env=dict(child_env or {}),
            log=out / "producer.log",
        )
        faults = _faults(s)
        end = start + s.wall(s.duration_s)
        run_cpu.reset([*members.pids(), producer.pid])  # start-up CPU is not the steps'
        while time.time() < end:
            now_sc = (time.time() - start) / s.time_scale
            while faults and faults[0][0] <= now_sc:
                at, _order, action, member, how, join = heapq.heappop(faults)
                if action == "stop":
                    members.stop(member, how)
                else:
                    members.start(member, join_at=start + s.wall(join) if join > at else None)
                note(now_sc, f"{action} {member} ({how.value})")
            cores = run_cpu.cores([*members.pids(), producer.pid])
            ticks.append(
                observer.tick(t=max(0.0, now_sc), members_up=members.up(), run_cores=cores)
            )
            note(now_sc, f"lag {sum(ticks[-1].lag):,}")
            time.sleep(max(0.0, tick_s - (time.time() - ticks[-1].wall)))
        producer.wait(timeout=60)
        stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.exists() else {}
    finally:
        if producer is not None and producer.poll() is None:
            producer.terminate()
            producer.wait(timeout=10)
        members.stop_all()
        observer.close()
    extra = {"producer": stats, "pool": pool, "topic": topic, "run_cpu_s": run_cpu.total_s}
    return _report(s, out, start, ticks, extra)


def _report(
    s: Scenario, out: Path, start: float, ticks: list[Tick], extra: dict[str, Any]
) -> tuple[Analysis, dict[str, Any]]:
    """Analyse the run against the model; write report.json, report.md, plots and ticks."""
    steps = read_steps(s, out, start)
    prediction = predict(s)
    stats = extra["producer"]
    analysis = analyse(s, prediction, ticks, steps, stats, run_cpu_s=extra["run_cpu_s"])
    plots = write_plots(out, s, prediction, ticks, steps)
    extra = {**extra, "ticks": len(ticks), "steps": len(steps)}
    write_reports(out, s, prediction, analysis, extra, plots)
    (out / "ticks.jsonl").write_text(
        "\n".join(json.dumps(t.to_json()) for t in ticks) + "\n", encoding="utf-8"
    )
    return analysis, extra
