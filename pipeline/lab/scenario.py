"""The lab's scenario: frozen, keyword-only value objects that validate themselves.

Every duration and rate is written in the scenario's own time (R-LAB-1's units: 2 s agent
steps, 20 events/s, a 180 s outage). ``time_scale`` maps it onto the machine: a run waits
``scale * t`` wall seconds for ``t`` scenario seconds and divides rates by the scale, so
``time_scale = 0.01`` runs a 2 s step as a 20 ms sleep and 20 events/s as 2,000/s. The model
(:mod:`pipeline.lab.model`) works in scenario time; only the runner converts.

Reason codes: the ``Lab`` family of :mod:`pipeline.reasons`. Unknown keys are errors (the loader names the key path).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import ConfigError
from pipeline.pool.config import Assignment
from pipeline.reasons import Lab
from pipeline.runtime.lanes import Concurrency
from pipeline.support.binder import config_error


def bad(key: str, value: Any, detail: str, reason: Lab = Lab.LAB_INVALID_VALUE) -> ConfigError:
    """A ConfigError whose message and context carry the key path and the reason code."""
    return config_error(key, value, detail, reason.value)


def positive(value: Any, key: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad(key, value, "must be a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise bad(key, value, "must be >= 0" if allow_zero else "must be > 0")
    return float(value)


def whole(value: Any, key: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise bad(key, value, f"must be an integer >= {minimum}")
    return value


class StepKind(enum.StrEnum):
    FIXED = "fixed"
    UNIFORM = "uniform"
    EXPONENTIAL = "exponential"
    LOGNORMAL = "lognormal"


class ArrivalKind(enum.StrEnum):
    CONSTANT = "constant"
    POISSON = "poisson"
    BURSTS = "bursts"


class StopSignal(enum.StrEnum):
    TERM = "term"  # SIGTERM: graceful -- finish or give up in-flight steps, commit, leave
    KILL = "kill"  # SIGKILL (kill -9): nothing committed after the last commit


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """Time one agent step takes. ``worst_s`` feeds the max.poll.interval check; by default the
    fixed value, the uniform maximum, or the 99th percentile of the other distributions."""

    kind: StepKind = StepKind.FIXED
    mean_s: float = 2.0
    min_s: float | None = None  # uniform only
    max_s: float | None = None  # uniform only
    sigma: float = 0.5  # lognormal only: sigma of the underlying normal
    worst_s: float | None = None

    def __post_init__(self) -> None:
        positive(self.mean_s, "mean_s")
        positive(self.sigma, "sigma")
        if self.kind is StepKind.UNIFORM:
            lo, hi = self.min_s, self.max_s
            if lo is None or hi is None:
                raise bad("min_s", lo, "uniform needs min_s and max_s", Lab.LAB_MISSING_KEY)
            positive(lo, "min_s", allow_zero=True)
            positive(hi, "max_s")
            if not lo <= self.mean_s <= hi or not math.isclose(self.mean_s, (lo + hi) / 2):
                raise bad("mean_s", self.mean_s, "uniform: mean_s must be (min_s + max_s) / 2")
        elif self.min_s is not None or self.max_s is not None:
            raise bad("min_s", self.min_s, f"min_s/max_s apply to uniform, not {self.kind}")
        if self.worst_s is not None:
            positive(self.worst_s, "worst_s")

    @property
    def worst(self) -> float:
        if self.worst_s is not None:
            return self.worst_s
        if self.kind is StepKind.FIXED:
            return self.mean_s
        if self.kind is StepKind.UNIFORM:
            assert self.max_s is not None
            return self.max_s
        if self.kind is StepKind.EXPONENTIAL:
            return self.mean_s * math.log(100)  # p99 of an exponential
        mu = math.log(self.mean_s) - self.sigma**2 / 2  # lognormal with this mean
        return math.exp(mu + 2.3263 * self.sigma)  # p99


@dataclass(frozen=True, kw_only=True)
class Arrival:
    """Events per second. Bursts: ``burst_rate`` for ``burst_length_s`` every ``burst_every_s``."""

    kind: ArrivalKind = ArrivalKind.CONSTANT
    rate: float = 20.0
    burst_rate: float | None = None
    burst_every_s: float | None = None
    burst_length_s: float | None = None

    def __post_init__(self) -> None:
        positive(self.rate, "rate", allow_zero=True)
        burst = (self.burst_rate, self.burst_every_s, self.burst_length_s)
        if self.kind is ArrivalKind.BURSTS:
            if any(v is None for v in burst):
                raise bad(
                    "burst_rate",
                    self.burst_rate,
                    "bursts need burst_rate, burst_every_s and burst_length_s",
                    Lab.LAB_MISSING_KEY,
                )
            positive(self.burst_rate, "burst_rate")
            every = positive(self.burst_every_s, "burst_every_s")
            if positive(self.burst_length_s, "burst_length_s") >= every:
                raise bad("burst_length_s", self.burst_length_s, "must be < burst_every_s")
        elif any(v is not None for v in burst):
            raise bad("burst_rate", self.burst_rate, f"burst keys do not apply to {self.kind}")

    def rate_at(self, t: float) -> float:
        if self.kind is not ArrivalKind.BURSTS:
            return self.rate
        assert self.burst_every_s and self.burst_length_s and self.burst_rate is not None
        return self.burst_rate if (t % self.burst_every_s) < self.burst_length_s else self.rate

    @property
    def mean_rate(self) -> float:
        if self.kind is not ArrivalKind.BURSTS:
            return self.rate
        assert self.burst_every_s and self.burst_length_s and self.burst_rate is not None
        share = self.burst_length_s / self.burst_every_s
        return self.burst_rate * share + self.rate * (1 - share)


@dataclass(frozen=True, kw_only=True)
class Keys:
    """``count`` keys, chosen with Zipf weights ``1 / (i + 1) ** skew`` (0 = even). Key ``i``
    goes to partition ``i % partitions`` (the lab producer names the partition, so the model
    knows each partition's share exactly; R-LAB-1: "events spread evenly")."""

    count: int = 480
    skew: float = 0.0

    def __post_init__(self) -> None:
        whole(self.count, "count")
        positive(self.skew, "skew", allow_zero=True)

    def weights(self) -> tuple[float, ...]:
        raw = [1.0 / (i + 1) ** self.skew for i in range(self.count)]
        total = sum(raw)
        return tuple(w / total for w in raw)


@dataclass(frozen=True, kw_only=True)
class Outage:
    """Members stopped at ``at_s`` for ``duration_s`` (then restarted with the same ids)."""

    at_s: float
    duration_s: float
    members: tuple[int, ...] | None = None  # None = all
    signal: StopSignal = StopSignal.TERM

    def __post_init__(self) -> None:
        positive(self.at_s, "at_s", allow_zero=True)
        positive(self.duration_s, "duration_s")


@dataclass(frozen=True, kw_only=True)
class Restart:
    """One member stopped at ``at_s`` and started again at once (a deploy, a crash loop)."""

    at_s: float
    member: int
    signal: StopSignal = StopSignal.TERM

    def __post_init__(self) -> None:
        positive(self.at_s, "at_s", allow_zero=True)
        whole(self.member, "member", minimum=0)


@dataclass(frozen=True, kw_only=True)
class Poison:
    """A record that fails and is retried with these backoffs (R-FAIL-3). The members
    run the runtime's exponential policy, so the backoffs must be geometric (b, b x f, ...)."""

    backoffs_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
    count_attempts: bool = False  # add one step per attempt to the stall

    def __post_init__(self) -> None:
        if not self.backoffs_s:
            raise bad("backoffs_s", self.backoffs_s, "needs at least one backoff")
        for i, b in enumerate(self.backoffs_s):
            positive(b, f"backoffs_s[{i}]", allow_zero=True)
        base, factor = self.backoffs_s[0], self.factor
        if any(
            not math.isclose(b, base * factor**i, rel_tol=1e-6, abs_tol=1e-9)
            for i, b in enumerate(self.backoffs_s)
        ):
            raise bad(
                "backoffs_s",
                list(self.backoffs_s),
                "must be geometric (b, b x f, b x f^2, ...): members retry with the runtime's "
                "exponential backoff",
            )

    @property
    def factor(self) -> float:
        b = self.backoffs_s
        return b[1] / b[0] if len(b) > 1 and b[0] > 0 else 1.0

    def retry_option(self, time_scale: float) -> str:
        """``fleet pool run --retry``: these waits, scaled, one attempt more than waits, no
        jitter (the model has none)."""
        base = self.backoffs_s[0] * time_scale
        return f"{base!r}:{self.factor!r}:{len(self.backoffs_s) + 1}:0"


@dataclass(frozen=True, kw_only=True)
class LagSeed:
    """Records per partition produced before the members start (the R-LAB-3 lag example), and an
    optional consume rate to model instead of the one the members' capacity gives."""

    initial: tuple[int, ...] = ()
    consume_rate: float | None = None

    def __post_init__(self) -> None:
        for i, n in enumerate(self.initial):
            whole(n, f"initial[{i}]", minimum=0)
        if self.consume_rate is not None:
            positive(self.consume_rate, "consume_rate")


@dataclass(frozen=True, kw_only=True)
class Members:
    count: int = 4
    max_poll_records: int = 50
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 10_000
    concurrency: Concurrency = Concurrency.PARTITION
    max_in_flight: int = 64  # per member: the pool's worker threads (its default)
    assignment: Assignment = Assignment.RANGE
    static_membership: bool = False
    dedupe: bool = True

    def __post_init__(self) -> None:
        whole(self.count, "count")
        whole(self.max_poll_records, "max_poll_records")
        whole(self.max_poll_interval_ms, "max_poll_interval_ms")
        whole(self.session_timeout_ms, "session_timeout_ms")
        whole(self.max_in_flight, "max_in_flight")
        for key in ("static_membership", "dedupe"):
            if not isinstance(getattr(self, key), bool):
                raise bad(key, getattr(self, key), "must be true or false")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One experiment, in scenario time. ``duration_s`` is the run length (scenario seconds)."""

    name: str
    partitions: int
    members: Members = field(default_factory=Members)
    step: StepTime = field(default_factory=StepTime)
    arrival: Arrival = field(default_factory=Arrival)
    keys: Keys = field(default_factory=Keys)
    outages: tuple[Outage, ...] = ()
    restarts: tuple[Restart, ...] = ()
    poison: Poison | None = None
    lag: LagSeed = field(default_factory=LagSeed)
    time_scale: float = 1.0
    duration_s: float = 60.0
    seed: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        whole(self.partitions, "partitions")
        positive(self.time_scale, "time_scale")
        positive(self.duration_s, "duration_s")
        for i, o in enumerate(self.outages):
            self._member_ids(o.members, f"outages[{i}].members")
            if o.at_s + o.duration_s > self.duration_s:
                raise bad(f"outages[{i}].at_s", o.at_s, "the outage must end before duration_s")
        for i, r in enumerate(self.restarts):
            self._member_ids((r.member,), f"restarts[{i}].member")
        if self.lag.initial and len(self.lag.initial) != self.partitions:
            raise bad(
                "lag.initial",
                self.lag.initial,
                f"needs one count per partition ({self.partitions})",
            )

    def _member_ids(self, ids: tuple[int, ...] | None, key: str) -> None:
        for m in ids or ():
            if not 0 <= m < self.members.count:
                raise bad(key, m, f"member index must be in 0..{self.members.count - 1}")

    def stopped(self, outage: Outage) -> tuple[int, ...]:
        return outage.members if outage.members is not None else tuple(range(self.members.count))

    def wall(self, scenario_seconds: float) -> float:
        """Wall seconds the run spends for ``scenario_seconds`` of scenario time."""
        return scenario_seconds * self.time_scale
