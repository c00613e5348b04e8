"""Who may SPAWN a profile and who may STOP a worker: the pure core of the authority rule.

Decided by the target gateway from verified facts only (docs/lifecycle.md "Authority",
R-LIFE-4, R-SPAWN-6):

* the requester's gid is the envelope's ``from``, proven by its signature (R-ENV-4);
* its host is the signing host, which the verifier checked against the roster's signed
  binding of that gid (R-ENV-7); its role is that binding's presence entry;
* what the worker is comes from its ``fleet_spawns`` row on this host (who spawned it, from
  which host, for which job).

Nothing the requester writes in a body (``parent``, ``requested_by``) grants authority.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pipeline.host.entity_config import ProfileConfig
from pipeline.presence.roles import Role


@dataclass(frozen=True)
class Requester:
    """The proven sender of a SPAWN or STOP: gid, signing host, roster role (None: unknown)."""

    gid: str
    host: str
    role: str | None

    def __str__(self) -> str:
        return f"{self.gid}@{self.host} (role {self.role or 'unknown'})"


def may_spawn(requester: Requester, profile: ProfileConfig) -> str | None:
    """None when the requester may spawn ``profile``; else why not (the FAILED's text)."""
    allowed = profile.spawn_allowed
    if allowed is None or allowed.admits(
        role=requester.role, gid=requester.gid, host=requester.host
    ):
        return None
    return (
        f"{requester} may not spawn profile {profile.name!r}: its spawn_allowed lists roles "
        f"{list(allowed.roles)}, gids {list(allowed.gids)}, hosts {list(allowed.hosts)}"
    )


def is_spawner(requester: Requester, worker: Any) -> bool:
    """The entity that spawned the worker, from the host it spawned it from."""
    return bool(requester.gid == worker.requester and requester.host == worker.requester_host)


def may_stop(
    requester: Requester,
    worker: Any,
    *,
    operators: Collection[str],
    spawned_into_job: bool,
    host: str,
) -> str | None:
    """None when the requester may stop ``worker`` (its ``fleet_spawns`` row); else why not.

    Permitted: its spawner; a ``main`` (roster role) that itself spawned a worker of the same
    job on this host (``spawned_into_job``, read from this host's rows by the caller); an
    operator named in this host's config."""
    if is_spawner(requester, worker) or requester.gid in operators:
        return None
    if worker.job and requester.role == Role.MAIN.value and spawned_into_job:
        return None
    job = f"job {worker.job!r}" if worker.job else "no job"
    return (
        f"{requester} may not stop {worker.spawn_id}: it is neither its spawner "
        f"({worker.requester}@{worker.requester_host}), a main of its job ({job}), nor an "
        f"operator of host {host}"
    )
