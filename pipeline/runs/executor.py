"""A tiny executor: runs a multi-step run, one database transaction per step (R-OUT-1).

It exists to prove the execution path's property: every step commits its state and its export
intent together and returns -- it never calls a broker, so a broker outage cannot stall or fail a
run. Tests and ``bench/bench_outbox.py`` drive it; applications use :class:`RunJournal` directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from .journal import RunJournal, StepRecord

StepFn = Callable[[int, dict[str, Any]], dict[str, Any]]


def counting_step(number: int, state: dict[str, Any]) -> dict[str, Any]:
    """The default step: deterministic, so a folded state can be compared across deliveries."""
    return {"step": number, "total": int(state.get("total", 0)) + number}


@dataclass(frozen=True, kw_only=True)
class RunResult:
    tenant: str
    run_id: str
    steps: list[StepRecord]
    elapsed_s: float
    thread_id: int


@dataclass(kw_only=True)
class Executor:
    """Runs runs. ``thread_ids`` records every thread that executed a step (for the tests)."""

    sessions: sessionmaker[Session]
    journal: RunJournal
    step_fn: StepFn = counting_step
    thread_ids: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(self, *, tenant: str, run_id: str, steps: int, complete: bool = True) -> RunResult:
        started = time.perf_counter()
        with self._lock:
            self.thread_ids.add(threading.get_ident())
        with self.sessions.begin() as session:
            self.journal.start(session, tenant=tenant, run_id=run_id)
        records = self.continue_run(tenant=tenant, run_id=run_id, steps=steps)
        if complete:
            with self.sessions.begin() as session:
                self.journal.complete(session, tenant=tenant, run_id=run_id)
        return RunResult(
            tenant=tenant,
            run_id=run_id,
            steps=records,
            elapsed_s=time.perf_counter() - started,
            thread_id=threading.get_ident(),
        )

    def continue_run(self, *, tenant: str, run_id: str, steps: int) -> list[StepRecord]:
        """Run ``steps`` more steps on the live branch, one transaction each."""
        records: list[StepRecord] = []
        with self._lock:
            self.thread_ids.add(threading.get_ident())
        for _ in range(steps):
            with self.sessions.begin() as session:
                records.append(self._one_step(session, tenant, run_id))
        return records

    def _one_step(self, session: Session, tenant: str, run_id: str) -> StepRecord:
        previous = self._current_state(session, tenant, run_id)
        number = int(previous.get("step", 0)) + 1
        return self.journal.step(
            session, tenant=tenant, run_id=run_id, state=self.step_fn(number, previous)
        )

    def _current_state(self, session: Session, tenant: str, run_id: str) -> dict[str, Any]:
        from sqlalchemy import func, select

        from .tables import run, run_branch, run_step

        branch = session.execute(
            select(run.c.live_branch).where(run.c.tenant == tenant, run.c.run_id == run_id)
        ).scalar_one()
        last = session.execute(
            select(func.max(run_step.c.step)).where(
                run_step.c.tenant == tenant,
                run_step.c.run_id == run_id,
                run_step.c.branch == branch,
            )
        ).scalar()
        if last is None:
            last = session.execute(
                select(run_branch.c.fork_step).where(
                    run_branch.c.tenant == tenant,
                    run_branch.c.run_id == run_id,
                    run_branch.c.branch == branch,
                )
            ).scalar_one()
        return self.journal.state_at(
            session, tenant=tenant, run_id=run_id, branch=int(branch), step=int(last)
        )

    def run_many(
        self, runs: Sequence[tuple[str, str]], *, steps: int, threads: int = 4
    ) -> list[RunResult]:
        """Run several runs concurrently on executor threads (their steps interleave)."""
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="executor") as pool:
            futures = [
                pool.submit(self.run, tenant=tenant, run_id=run_id, steps=steps)
                for tenant, run_id in runs
            ]
            return [f.result() for f in futures]
