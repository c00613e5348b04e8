"""The events a scenario offers, in scenario time (pure and seeded: a run is reproducible).

Each event carries its own simulated step time, drawn here: the member's built-in sleep handler
just sleeps ``step_s x time_scale``, so step distributions need no knowledge on the member side.
Key ``i`` goes to partition ``i % partitions`` (see :class:`~pipeline.lab.scenario.Keys`);
evenly weighted keys are dealt in turn, so every partition gets exactly its share.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from .scenario import ArrivalKind, Scenario, StepKind


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # scenario seconds after the start (prefilled lag: 0, before members start)
    seq: int
    key: int
    partition: int
    step_s: float  # scenario seconds
    poison: bool = False
    prefill: bool = False

    def payload(self) -> bytes:
        return json.dumps(
            {"seq": self.seq, "step_s": self.step_s, "poison": self.poison}, separators=(",", ":")
        ).encode()


def step_time(s: Scenario, rng: random.Random) -> float:
    st = s.step
    if st.kind is StepKind.FIXED:
        return st.mean_s
    if st.kind is StepKind.UNIFORM:
        assert st.min_s is not None and st.max_s is not None
        return rng.uniform(st.min_s, st.max_s)
    if st.kind is StepKind.EXPONENTIAL:
        return rng.expovariate(1.0 / st.mean_s)
    mu = math.log(st.mean_s) - st.sigma**2 / 2
    return rng.lognormvariate(mu, st.sigma)


def events(s: Scenario) -> Iterator[Event]:
    """Prefilled lag first (t = 0, ``prefill``), then arrivals until ``duration_s``."""
    rng = random.Random(s.seed)
    seq = itertools.count()
    for part, n in enumerate(s.lag.initial):
        keys = [k for k in range(s.keys.count) if k % s.partitions == part] or [part]
        for i in range(n):
            k = keys[i % len(keys)]
            yield Event(0.0, next(seq), k, part, step_time(s, rng), prefill=True)
    weights = s.keys.weights()
    even = s.keys.skew == 0
    poison_at = s.duration_s / 10 if s.poison is not None else None
    t = 0.0
    n = 0
    while True:
        rate = s.arrival.rate_at(t)
        if rate <= 0:
            t += 1.0  # a silent stretch: look again a scenario second later
            if t >= s.duration_s:
                return
            continue
        if s.arrival.kind is ArrivalKind.POISSON:
            t += rng.expovariate(rate)
        else:
            t += 1.0 / rate
        if t >= s.duration_s:
            return
        key = n % s.keys.count if even else rng.choices(range(s.keys.count), weights)[0]
        poison = poison_at is not None and t >= poison_at and key == 0
        if poison:
            poison_at = None  # one poison record, on key 0 (partition 0)
        yield Event(t, next(seq), key, key % s.partitions, step_time(s, rng), poison=poison)
        n += 1
