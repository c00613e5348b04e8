"""Transactional outbox (R-OUT-1): intents written with the state, shipped by a separate relay.

* :func:`write` -- inside the caller's transaction; never commits, never calls a broker.
* :class:`Relay` -- its own process (``fleet relay run``): publish in ``(branch, lsn)`` order,
  ack only confirmed deliveries, resend a branch from its lowest unacknowledged lsn.
* :class:`Fold` -- the consumer's exactly-once: idempotent on ``(branch_key, lsn)``.

See ``docs/outbox.md`` for the invariants and crash windows.
"""

from .fold import Fold, Offer
from .headers import BRANCH_HEADER, LSN_HEADER, TENANT_HEADER, fold_position
from .metrics import OutboxMetrics, PublishFailure
from .relay import Relay
from .status import BranchStatus, OutboxStatus, backlog, outbox_status
from .tables import RowStatus, outbox, outbox_branch, outbox_sent
from .writer import abandon_branch, branch_positions, write

__all__ = [
    "BRANCH_HEADER",
    "LSN_HEADER",
    "TENANT_HEADER",
    "BranchStatus",
    "Fold",
    "Offer",
    "OutboxMetrics",
    "OutboxStatus",
    "PublishFailure",
    "Relay",
    "RowStatus",
    "abandon_branch",
    "backlog",
    "branch_positions",
    "fold_position",
    "outbox",
    "outbox_branch",
    "outbox_sent",
    "outbox_status",
    "write",
]
