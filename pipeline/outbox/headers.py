"""Header names the relay adds to a published row (the stored form is :mod:`pipeline.record_headers`).

The relay appends three headers to the stored ones so a consumer can fold without parsing the body:

* ``fleet.branchKey`` -- the branch key, UTF-8;
* ``fleet.lsn`` -- the lsn as ASCII decimal (readable in ``kcat``);
* ``fleet.tenant`` -- the tenant, UTF-8.

Stored headers are published verbatim and in order (the gateway stores already-signed envelope
headers; the signature covers a fixed subset, so the three extra headers do not disturb it).
"""

from __future__ import annotations

from pipeline.record import Headers

BRANCH_HEADER = "fleet.branchKey"
LSN_HEADER = "fleet.lsn"
TENANT_HEADER = "fleet.tenant"


def fold_headers(tenant: str, branch_key: str, lsn: int) -> Headers:
    return [
        (BRANCH_HEADER, branch_key.encode()),
        (LSN_HEADER, str(lsn).encode()),
        (TENANT_HEADER, tenant.encode()),
    ]


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
