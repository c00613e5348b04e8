"""The relay's fold headers (pipeline/outbox/headers.py): the cached form equals the plain one."""

from __future__ import annotations

from pipeline.outbox.headers import FoldHeaders, fold_headers, fold_position


def test_cached_fold_headers_are_the_plain_ones_in_order_for_every_row() -> None:
    cached = FoldHeaders()
    for tenant, branch, lsn in [
        ("t", "a/b1", 1),
        ("t", "a/b1", 2),
        ("u", "a/b1", 1),
        ("t", "é", 10**12),
    ]:
        headers = cached(tenant, branch, lsn)
        assert headers == fold_headers(tenant, branch, lsn)
        assert fold_position(headers) == (branch, lsn)
    first = cached("t", "a/b1", 3)
    first.append(("x", b"y"))  # each row gets its own list: a caller may extend it
    assert cached("t", "a/b1", 3) == fold_headers("t", "a/b1", 3)
