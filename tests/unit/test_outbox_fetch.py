"""The relay's hot read (pipeline/outbox/fetch.py): one SQL text per batch, both paramstyles."""

from __future__ import annotations

import pytest

from pipeline.outbox.fetch import COLUMNS, FetchSql


def test_pending_is_a_literal_so_the_partial_index_matches() -> None:
    """``status = 0`` must stay a literal: a bound parameter would not match ``ix_outbox_pending``
    (on SQLite and PostgreSQL alike) and every fetch would scan the table."""
    sql, params = FetchSql("qmark", tenant=None, limit=500).build(after=None)
    assert sql == (
        f"SELECT {', '.join(COLUMNS)} FROM outbox WHERE status = 0 ORDER BY id LIMIT 500"
    )
    assert params == ()


@pytest.mark.parametrize(("paramstyle", "p"), [("qmark", "?"), ("pyformat", "%s")])
def test_tenant_cursor_and_stopped_branches_are_bound_parameters(paramstyle: str, p: str) -> None:
    sql, params = FetchSql(paramstyle, tenant="acme", limit=7).build(
        after=41, stopped=[("acme", "r1/b1"), ("acme", "x'); DROP TABLE outbox; --")]
    )
    assert sql.endswith(
        f"WHERE status = 0 AND tenant = {p} AND id > {p}"
        f" AND NOT (tenant = {p} AND branch_key = {p})"
        f" AND NOT (tenant = {p} AND branch_key = {p}) ORDER BY id LIMIT 7"
    )
    assert params == ("acme", 41, "acme", "r1/b1", "acme", "x'); DROP TABLE outbox; --")


def test_an_unknown_paramstyle_is_refused() -> None:
    with pytest.raises(ValueError, match="numeric"):
        FetchSql("numeric", tenant=None, limit=1)
