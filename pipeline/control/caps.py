"""Spawn admission (R-FAIL-8: "a cap on subagents and a budget per job").

Pure core, no I/O: the target gateway counts its own workers and asks :func:`admit` whether a
SPAWN may start one. Refusals carry a stable reason from :class:`pipeline.reasons.Lifecycle`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.host.entity_config import ProfileConfig
from pipeline.reasons import Lifecycle


@dataclass(frozen=True, kw_only=True, slots=True)
class Counts:
    """What the target counts before admitting (its own workers of this profile)."""

    live_of_parent: int = 0
    live_of_job: int = 0
    spawned_of_job: int = 0  # every admitted spawn of the job, live or not: the budget


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    admitted: bool
    reason: Lifecycle | None = None
    detail: str = ""


def admit(
    profiles: Mapping[str, ProfileConfig], profile: str, counts: Counts, *, job: str | None
) -> Admission:
    """Admit or refuse one spawn. Per-job caps apply only when the SPAWN names a job."""
    spec = profiles.get(profile)
    if spec is None:
        known = ", ".join(sorted(profiles)) or "none"
        return Admission(
            admitted=False,
            reason=Lifecycle.UNKNOWN_PROFILE,
            detail=f"no profile {profile!r} on this host (known: {known})",
        )
    checks = [("live workers of this parent", counts.live_of_parent, spec.max_live_per_parent)]
    if job is not None:
        checks += [
            ("live workers of this job", counts.live_of_job, spec.max_live_per_job),
            ("spawns of this job", counts.spawned_of_job, spec.max_spawns_per_job),
        ]
    for what, have, cap in checks:
        if have >= cap:
            return Admission(
                admitted=False,
                reason=Lifecycle.CAP_EXCEEDED,
                detail=f"{what}: {have} of {cap} ({spec.name})",
            )
    return Admission(admitted=True)
