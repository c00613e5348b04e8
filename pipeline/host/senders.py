"""Who this host signs for: the one answer to "is this gid a local sender here?".

R-ENV-7: a gateway signs only for its own entities. Those are the ``[[entities]]`` of its
config **and** the workers it spawned and has not reaped. The second set lives in the host's store
(the target side's ``fleet_spawns`` rows, written by the control handler), so every process of
the host -- the gateway, ``fleet send``, ``fleet mcp`` -- reads the same rows: there is no copy to
keep in step. The store check is injected (``spawned``) by the composition root, which keeps this
module free of the control plane.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from pipeline.errors import DeliveryError
from pipeline.reasons import Delivery

NOT_LOCAL_SENDER = Delivery.NOT_LOCAL_SENDER

SpawnedCheck = Callable[[Session, str], bool]
"""True when ``gid`` is a worker this host spawned and has not reaped (read in ``session``)."""


@dataclass(frozen=True, kw_only=True)
class LocalSenders:
    """The configured entities, plus whatever ``spawned`` admits from the store."""

    host: str
    configured: frozenset[str]
    spawned: SpawnedCheck | None = None

    def admits(self, session: Session, gid: str) -> bool:
        if gid in self.configured:
            return True
        return self.spawned is not None and self.spawned(session, gid)

    def check(self, session: Session, gid: str) -> None:
        """``NOT_LOCAL_SENDER`` unless ``gid`` is an entity of this host right now."""
        if not self.admits(session, gid):
            raise DeliveryError(
                f"{gid} is not an entity of host {self.host}: a gateway signs only for its own "
                "entities (configured, or spawned here and not reaped)",
                reason=NOT_LOCAL_SENDER,
                context={"from": gid},
            )
