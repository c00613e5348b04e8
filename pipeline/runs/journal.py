"""The run journal: state and export intent of every step in one transaction (R-OUT-1).

A run has branches; exactly one is live. Each step of the live branch writes its state row and
its outbox row together, so "state committed" and "event queued" can never disagree. A rewind
opens a new live branch from an earlier step and abandons the old one: the old branch's unsent
rows are dropped in the same transaction, so only the live branch is exported (R-OUT-6).

``BranchKey`` is ``<tenant>/<run>/b<n>``; the Kafka key is ``<tenant>/<run>`` so every branch of a
run lands on one partition, in order (R-OUT-3: partition key from ``(TenantId, RunId)``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from pipeline import outbox, schemas
from pipeline.errors import ConfigError
from pipeline.kafka.topics import check_name
from pipeline.reasons import Runs
from pipeline.support.clock import now_ms

from .tables import run, run_branch, run_step


def branch_key_of(tenant: str, run_id: str, branch: int) -> str:
    return f"{tenant}/{run_id}/b{branch}"


def partition_key_of(tenant: str, run_id: str) -> bytes:
    return f"{tenant}/{run_id}".encode()


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    step: int
    branch: int
    branch_key: str
    lsn: int


@dataclass(frozen=True, kw_only=True)
class RunJournal:
    """Writes runs, steps and rewinds; every method works inside the caller's transaction."""

    topic: str

    def start(self, session: Session, *, tenant: str, run_id: str) -> str:
        check_name(tenant, what="tenant")
        check_name(run_id, what="run id")
        now = time.time()
        session.execute(
            insert(run).values(
                tenant=tenant,
                run_id=run_id,
                live_branch=1,
                status="running",
                created_at=now,
                updated_at=now,
            )
        )
        key = branch_key_of(tenant, run_id, 1)
        session.execute(
            insert(run_branch).values(
                tenant=tenant,
                run_id=run_id,
                branch=1,
                branch_key=key,
                parent=None,
                fork_step=0,
                live=True,
            )
        )
        return key

    def step(
        self, session: Session, *, tenant: str, run_id: str, state: Mapping[str, Any]
    ) -> StepRecord:
        """Append one step (its state and its export event) to the live branch."""
        branch = self._live_branch(session, tenant, run_id)
        last = session.execute(
            select(func.max(run_step.c.step)).where(
                run_step.c.tenant == tenant,
                run_step.c.run_id == run_id,
                run_step.c.branch == branch,
            )
        ).scalar()
        fork = session.execute(
            select(run_branch.c.fork_step).where(
                run_branch.c.tenant == tenant,
                run_branch.c.run_id == run_id,
                run_branch.c.branch == branch,
            )
        ).scalar_one()
        number = int(last if last is not None else fork) + 1
        body = json.dumps(dict(state), sort_keys=True)
        lsn = self._export(
            session, tenant, run_id, branch, kind="STEP", step=number, payload=body.encode()
        )
        session.execute(
            insert(run_step).values(
                tenant=tenant,
                run_id=run_id,
                branch=branch,
                step=number,
                state=body,
                lsn=lsn,
                created_at=time.time(),
            )
        )
        self._touch(session, tenant, run_id)
        return StepRecord(
            step=number, branch=branch, branch_key=branch_key_of(tenant, run_id, branch), lsn=lsn
        )

    def rewind(self, session: Session, *, tenant: str, run_id: str, to_step: int) -> str:
        """Open a new live branch continuing from ``to_step``; the old branch stops exporting."""
        old = self._live_branch(session, tenant, run_id)
        newest = session.execute(
            select(func.max(run_branch.c.branch)).where(
                run_branch.c.tenant == tenant, run_branch.c.run_id == run_id
            )
        ).scalar_one()
        new = int(newest) + 1
        key = branch_key_of(tenant, run_id, new)
        session.execute(
            update(run_branch)
            .where(
                run_branch.c.tenant == tenant,
                run_branch.c.run_id == run_id,
                run_branch.c.branch == old,
            )
            .values(live=False)
        )
        session.execute(
            insert(run_branch).values(
                tenant=tenant,
                run_id=run_id,
                branch=new,
                branch_key=key,
                parent=old,
                fork_step=to_step,
                live=True,
            )
        )
        session.execute(
            update(run)
            .where(run.c.tenant == tenant, run.c.run_id == run_id)
            .values(live_branch=new, updated_at=time.time())
        )
        outbox.abandon_branch(session, tenant=tenant, branch_key=branch_key_of(tenant, run_id, old))
        state = self.state_at(session, tenant=tenant, run_id=run_id, branch=old, step=to_step)
        self._export(
            session,
            tenant,
            run_id,
            new,
            kind="REWOUND",
            step=to_step,
            payload=json.dumps(state).encode(),
        )
        return key

    def complete(self, session: Session, *, tenant: str, run_id: str) -> int:
        branch = self._live_branch(session, tenant, run_id)
        session.execute(
            update(run)
            .where(run.c.tenant == tenant, run.c.run_id == run_id)
            .values(status="completed", updated_at=time.time())
        )
        return self._export(session, tenant, run_id, branch, kind="COMPLETED", step=0, payload=b"")

    def state_at(
        self, session: Session, *, tenant: str, run_id: str, branch: int, step: int
    ) -> dict[str, Any]:
        """The state after ``step`` on ``branch``, following the fork chain back to its parent."""
        if step == 0:
            return {}
        row = session.execute(
            select(run_step.c.state).where(
                run_step.c.tenant == tenant,
                run_step.c.run_id == run_id,
                run_step.c.branch == branch,
                run_step.c.step == step,
            )
        ).scalar()
        if row is not None:
            return dict(json.loads(row))
        parent = session.execute(
            select(run_branch.c.parent).where(
                run_branch.c.tenant == tenant,
                run_branch.c.run_id == run_id,
                run_branch.c.branch == branch,
            )
        ).scalar()
        if parent is None:
            raise ConfigError(f"run {run_id!r} has no step {step} on branch {branch}")
        return self.state_at(session, tenant=tenant, run_id=run_id, branch=parent, step=step)

    # -- internals ---------------------------------------------------------------------------
    def _live_branch(self, session: Session, tenant: str, run_id: str) -> int:
        # FOR UPDATE (PostgreSQL) serialises two writers of one run; SQLite serialises anyway.
        branch = session.execute(
            select(run.c.live_branch)
            .where(run.c.tenant == tenant, run.c.run_id == run_id)
            .with_for_update()
        ).scalar()
        if branch is None:
            raise ConfigError(f"no run {run_id!r} for tenant {tenant!r}", reason=Runs.RUN_UNKNOWN)
        return int(branch)

    def _touch(self, session: Session, tenant: str, run_id: str) -> None:
        session.execute(
            update(run)
            .where(run.c.tenant == tenant, run.c.run_id == run_id)
            .values(updated_at=time.time())
        )

    def _export(
        self,
        session: Session,
        tenant: str,
        run_id: str,
        branch: int,
        *,
        kind: str,
        step: int,
        payload: bytes,
    ) -> int:
        value = schemas.encode(
            "outbox_event",
            {
                "tenant": tenant,
                "runId": run_id,
                "branch": branch,
                "kind": kind,
                "step": step,
                "payload": payload,
                "tsMs": now_ms(),
            },
        )
        return outbox.write(
            session,
            topic=self.topic,
            key=partition_key_of(tenant, run_id),
            value=value,
            branch_key=branch_key_of(tenant, run_id, branch),
            tenant=tenant,
        )
