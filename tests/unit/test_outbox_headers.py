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


def test_the_size_from_packed_headers_is_the_size_from_the_headers() -> None:
    from pipeline.outbox.limits import packed_record_size, record_size
    from pipeline.record_headers import pack_headers

    for headers in ([], [("v", b"1"), ("naïve", b"\x00" * 300), ("sig", b"s" * 64)]):
        for key, value in ((None, None), (b"k", b"value" * 50)):
            assert packed_record_size(
                key=key, value=value, packed=pack_headers(headers), count=len(headers),
                tenant="t", branch_key="A>b@B", lsn=10**12,
            ) == record_size(
                key=key, value=value, headers=headers, tenant="t", branch_key="A>b@B", lsn=10**12
            )  # fmt: skip
