"""Fleet-wide per-job caps: the verdict of every admission claim, folded from the job ledger.

Pure core, no I/O (the log adapter is :mod:`pipeline.control.job_ledger`). Every target
gateway that admits a spawn of a job appends a :class:`Claim` to the job's partition of the
``jobs`` topic and reads that partition up to its own claim. A claim's verdict is a function of
the claims and releases *before it in the partition* and of nothing else:

* a claim is admitted iff, among the earlier claims of its ``(job, profile)``, the admitted ones
  not yet released are fewer than its ``max_live`` and all admitted ones are fewer than its
  ``max_spawns`` (the caps travel in the claim: the target's own profile decides);
* a second claim of the same ``spawn_id`` (a redelivered SPAWN, a restarted gateway) changes
  nothing and has the first one's verdict;
* a :class:`Release` frees the live slot of an admitted claim, and the budget slot only when
  the worker never started (``max_spawns_per_job`` counts every spawn that started, live or
  not; a claim the target then refused locally gives both back). Only the claim's own host may
  release it, once.

One partition totally orders a job's claims, so every reader -- any gateway, before or after a
restart -- folds the same prefix and reaches the same verdict: two hosts admitting concurrently
never both take the last slot (R-FAIL-8).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """Host ``host`` asks to start worker ``spawn_id`` of ``profile`` for ``job``."""

    job: str
    spawn_id: str
    host: str
    profile: str
    max_live: int
    max_spawns: int
    at_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    """Worker ``spawn_id`` of an admitted claim ended (reaped, failed, refused after claiming)."""

    job: str
    spawn_id: str
    host: str
    launched: bool = True  # False: it never started (refused here): the budget slot comes back


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    admitted: bool
    detail: str = ""


@dataclass
class _Job:
    live: set[str] = field(default_factory=set)
    spawned: int = 0


@dataclass
class JobBook:
    """The fold of the ledger read so far (one per gateway; the log is the truth)."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    _jobs: dict[tuple[str, str], _Job] = field(default_factory=dict)

    def apply(self, record: Claim | Release) -> None:
        if isinstance(record, Release):
            claim = self.claims.get(record.spawn_id)
            if claim is None or claim.host != record.host or claim.job != record.job:
                return  # a release of nobody's claim, or of another host's: ignored by all
            job = self._jobs[(claim.job, claim.profile)]
            if record.spawn_id in job.live:  # admitted and not released yet (once only)
                job.live.discard(record.spawn_id)
                job.spawned -= 0 if record.launched else 1
            self.released.add(record.spawn_id)
            return
        if record.spawn_id in self.verdicts:
            return  # a repeated claim: the first one's verdict stands
        job = self._jobs.setdefault((record.job, record.profile), _Job())
        self.claims[record.spawn_id] = record
        if len(job.live) >= record.max_live:
            verdict = Verdict(
                admitted=False,
                detail=f"live workers of job {record.job} across the fleet: "
                f"{len(job.live)} of {record.max_live} ({record.profile})",
            )
        elif job.spawned >= record.max_spawns:
            verdict = Verdict(
                admitted=False,
                detail=f"spawns of job {record.job} across the fleet: "
                f"{job.spawned} of {record.max_spawns} ({record.profile})",
            )
        else:
            verdict = Verdict(admitted=True)
            job.live.add(record.spawn_id)
            job.spawned += 1
        self.verdicts[record.spawn_id] = verdict

    def live(self, job: str, profile: str) -> int:
        found = self._jobs.get((job, profile))
        return 0 if found is None else len(found.live)

    def held_by(self, host: str) -> list[Claim]:
        """``host``'s admitted claims not released yet: the ones it must release when done."""
        return [
            c
            for gid, c in self.claims.items()
            if c.host == host and self.verdicts[gid].admitted and gid not in self.released
        ]
