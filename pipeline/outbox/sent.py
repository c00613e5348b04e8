"""What "sent" and "pending" mean, as SQL, for every reader of the outbox.

The relay acks a branch, not a row: ``outbox_sent.sent_lsn`` is the branch's watermark, and a
row whose own status is ``PENDING`` is *sent* once its lsn is at or below it (R-OUT-4: only what
the broker confirmed, a per-branch prefix). ``SENT`` rows (acked before the watermark existed,
or by the in-process effects drain) are sent too; ``FAILED`` and ``DROPPED`` rows are neither,
whatever the watermark. Readers take these expressions instead of testing ``status`` alone.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, func, or_, select

from .tables import RowStatus, outbox, outbox_sent


def watermark() -> ColumnElement[int]:
    """The ``sent_lsn`` of the outbox row's branch (0 when it has none), correlated to ``outbox``."""
    b = outbox_sent.c
    mark = select(b.sent_lsn).where(
        b.tenant == outbox.c.tenant, b.branch_key == outbox.c.branch_key
    )
    return func.coalesce(mark.scalar_subquery(), 0)


def is_pending() -> ColumnElement[bool]:
    """The row still has to be published: ``PENDING`` and above its branch's watermark."""
    return and_(outbox.c.status == int(RowStatus.PENDING), outbox.c.lsn > watermark())


def is_sent() -> ColumnElement[bool]:
    """The broker confirmed the row: ``SENT``, or ``PENDING`` at or below the watermark."""
    c = outbox.c
    return or_(
        c.status == int(RowStatus.SENT),
        and_(c.status == int(RowStatus.PENDING), c.lsn <= watermark()),
    )
