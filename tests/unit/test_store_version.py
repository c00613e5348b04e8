"""The schema check's fast path (pipeline.store.version) agrees with Alembic, and only says
"at head" for a store Alembic would call at head (docs/store.md)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from pipeline.store import make_engine, readonly
from pipeline.store.schema import _scripts, head_revision
from pipeline.store.version import VERSION_TABLE, at_head, script_head


def test_the_scripts_head_is_alembics_head() -> None:
    assert script_head() == head_revision()


def test_only_a_store_at_head_is_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    fresh = sa.create_engine(url)
    assert not at_head(fresh)  # no version table: Alembic creates the store
    engine = make_engine(url)
    assert at_head(readonly(engine))
    older = next(s.revision for s in _scripts().walk_revisions() if s.revision != head_revision())
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = :v"), {"v": older})
    assert not at_head(engine)
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {VERSION_TABLE} VALUES (:v)"), {"v": head_revision()})
    assert not at_head(engine)  # two rows: branches, Alembic's call
    engine.dispose()
    fresh.dispose()
