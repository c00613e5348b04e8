"""The start-up check's common case, without Alembic: is this store at head?

Every process checks its store when it makes an engine (:func:`pipeline.store.make_engine`).
Alembic's own check imports Alembic and loads every revision script, which costs more than a
``fleet send`` does otherwise. So the head is read from the scripts' ``revision`` and
``down_revision`` lines, the store's revision with one plain query, and only a store that is not
at head -- fresh, behind, ahead, or a history that is not one linear chain -- goes on to
:func:`pipeline.store.schema.ensure_schema`, which decides with Alembic. This path never
changes a store and never accepts one Alembic would refuse: when in doubt it answers "not at
head" (``tests/unit/test_store_version.py`` holds :func:`script_head` to Alembic's head).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sqlalchemy import Engine, inspect, text

SCRIPT_LOCATION = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"

_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*\"([^\"]+)\"\s*$", re.M)
_DOWN_REVISION = re.compile(
    r"^down_revision(?:\s*:\s*str\s*\|\s*None)?\s*=\s*(?:\"([^\"]+)\"|None)\s*$", re.M
)


@functools.cache
def script_head() -> str | None:
    """The newest revision in ``migrations/versions``; None unless the scripts form one chain
    whose every file states a plain ``revision`` and ``down_revision``."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (SCRIPT_LOCATION / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION.search(source), _DOWN_REVISION.search(source)
        if revision is None or down is None:
            return None
        revisions.add(revision[1])
        if down[1] is not None:
            parents.add(down[1])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 and parents <= revisions else None


def at_head(engine: Engine) -> bool:
    """True when the store's version row names :func:`script_head` (a read; no lock taken on
    an engine from :func:`pipeline.store.readonly`)."""
    head = script_head()
    if head is None:
        return False
    with engine.connect() as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return False
        found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    return list(found) == [head]
