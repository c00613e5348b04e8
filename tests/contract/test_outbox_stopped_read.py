"""The relay's list of stopped branches (``pipeline.outbox.terminal.stopped_branches``).

R-OUT-2: a branch with a ``FAILED`` row publishes nothing after it, so the relay lists those
branches on every start; the listing reads the partial index of ``FAILED`` rows, not the outbox.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, update

from pipeline.outbox import RowStatus, outbox, write
from pipeline.outbox.terminal import stopped_branches
from pipeline.store import make_engine, session_factory


def test_stopped_branches_lists_each_branch_with_a_failed_row_once(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        with session_factory(engine).begin() as s:
            for _ in range(3):
                for branch in ("a", "b", "c"):
                    write(s, topic="t", key=b"k", value=b"v", branch_key=branch, tenant="acme")
        with engine.begin() as conn:  # two FAILED rows in branch a (a test shape), one in c
            conn.execute(
                update(outbox)
                .where(
                    ((outbox.c.branch_key == "a") & (outbox.c.lsn >= 2))
                    | ((outbox.c.branch_key == "c") & (outbox.c.lsn == 3))
                )
                .values(status=int(RowStatus.FAILED))
            )
        seen: list[str] = []

        def keep(_c: Any, _cur: Any, statement: str, *_rest: Any) -> None:
            seen.append(statement)

        event.listen(engine, "before_cursor_execute", keep)
        assert stopped_branches(engine) == {("acme", "a"), ("acme", "c")}
        assert stopped_branches(engine, tenant="other") == set()
        event.remove(engine, "before_cursor_execute", keep)
        if engine.dialect.name == "sqlite":
            select_sql = next(s for s in seen if s.lstrip().upper().startswith("SELECT"))
            with engine.connect() as conn:
                plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + select_sql).all()
            assert any("ix_outbox_failed" in str(step) for step in plan), plan
    finally:
        engine.dispose()
