"""docs/store.md names every table of the store with its retention rule, or says why it has
none: a table added without a line there fails here (bounded stores)."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.bootstrap.retention import RULES
from pipeline.retention.rules import StoreTable
from pipeline.store import metadata
from pipeline.store.migrations import load_all_tables

DOC = Path(__file__).resolve().parents[2] / "docs" / "store.md"


def _retention_table() -> set[str]:
    text = DOC.read_text()
    start = text.index("| table | purged once |")
    rows = text[start:].split("\n\n", 1)[0].splitlines()[2:]
    names: set[str] = set()
    for row in rows:
        names |= set(re.findall(r"`([a-z_]+)`", row.split("|")[1]))
    return names


def test_every_table_of_the_store_has_a_line_in_the_retention_table() -> None:
    load_all_tables()
    documented = _retention_table()
    internal = {"alembic_version"}
    assert set(metadata.tables) - documented - internal == set()
    assert {t.value for t in StoreTable} <= documented
    assert {r.name for r in RULES} == set(StoreTable), "one rule per bounded table"
