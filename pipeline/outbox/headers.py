"""Header names the relay adds to a published row (the stored form is :mod:`pipeline.record_headers`).

The relay appends three headers to the stored ones so a consumer can fold without parsing the body:

* ``fleet.branchKey`` -- the branch key, UTF-8;
* ``fleet.lsn`` -- the lsn as ASCII decimal (readable in ``kcat``);
* ``fleet.tenant`` -- the tenant, UTF-8.

Stored headers are published verbatim and in order (the gateway stores already-signed envelope
headers; the signature covers a fixed subset, so the three extra headers do not disturb it). With
tracing on, one is replaced: the stored ``traceparent`` becomes the relay span's
(``TRACING.produced``; ``TRACING`` is imported from here by the relay, beside the fold headers).
"""

from __future__ import annotations

from pipeline.record import Headers
from pipeline.tracing import TRACING

__all__ = ["BRANCH_HEADER", "LSN_HEADER", "TENANT_HEADER", "TRACING", "FoldHeaders",
           "fold_headers", "fold_position"]  # fmt: skip

BRANCH_HEADER = "fleet.branchKey"
LSN_HEADER = "fleet.lsn"
TENANT_HEADER = "fleet.tenant"


def fold_headers(tenant: str, branch_key: str, lsn: int) -> Headers:
    return [
        (BRANCH_HEADER, branch_key.encode()),
        (LSN_HEADER, str(lsn).encode()),
        (TENANT_HEADER, tenant.encode()),
    ]


class FoldHeaders:
    """:func:`fold_headers` for the relay's hot loop: a branch's two constant headers are
    encoded once and reused (a relay ships many rows of few branches); only the lsn is new."""

    __slots__ = ("_branches",)

    def __init__(self) -> None:
        self._branches: dict[tuple[str, str], tuple[tuple[str, bytes], tuple[str, bytes]]] = {}

    def __call__(self, tenant: str, branch_key: str, lsn: int) -> Headers:
        fixed = self._branches.get((tenant, branch_key))
        if fixed is None:
            if len(self._branches) > 10_000:
                self._branches.clear()  # only a cache: a relay's active branches are few
            fixed = self._branches[(tenant, branch_key)] = (
                (BRANCH_HEADER, branch_key.encode()),
                (TENANT_HEADER, tenant.encode()),
            )
        return [fixed[0], (LSN_HEADER, b"%d" % lsn), fixed[1]]


def fold_position(headers: Headers | None) -> tuple[str, int] | None:
    """``(branch_key, lsn)`` from a consumed record's headers, or ``None`` if it has none."""
    branch: str | None = None
    lsn: int | None = None
    for name, value in headers or ():
        if name == BRANCH_HEADER and value is not None:
            branch = bytes(value).decode()
        elif name == LSN_HEADER and value is not None:
            lsn = int(bytes(value))
    if branch is None or lsn is None:
        return None
    return branch, lsn
