"""The docs' reason tables and the one reason registry (``pipeline.reasons``) agree.

A table marked ``<!-- reasons: NAME -->`` (NAME = a family, or a derived set such as
``DEAD_LETTER_REASONS``) must list exactly that set; every code in any other reason table must
exist in the registry. So a code renamed in the code, or a code the docs invent
(``OVERFLOW``/``SWEPT_EXPIRED`` once), fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline import reasons

DOCS = Path(__file__).resolve().parents[2] / "docs"
CODE = re.compile(r"`([A-Z][A-Z0-9_]{2,})`")


def reason_tables(text: str) -> list[tuple[str | None, set[str]]]:
    """(marker, codes in the table's reason column) for each table with a 'reason' column."""
    out: list[tuple[str | None, set[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        cells = [c.strip().lower() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and "reason" in cells and i + 1 < len(lines):
            col = cells.index("reason")
            back = i - 1
            while back >= 0 and not lines[back].strip():
                back -= 1
            m = re.match(r"<!-- reasons: (\w+) -->", lines[back].strip()) if back >= 0 else None
            codes: set[str] = set()
            i += 2  # header and separator
            while i < len(lines) and lines[i].startswith("|"):
                row = lines[i].strip().strip("|").split("|")
                if col < len(row):
                    codes |= set(CODE.findall(row[col]))
                i += 1
            out.append((m.group(1) if m else None, codes))
            continue
        i += 1
    return out


def expected(marker: str) -> set[str]:
    if marker in reasons.FAMILIES:
        return {str(m) for m in reasons.FAMILIES[marker]}
    value = getattr(reasons, marker)
    assert isinstance(value, frozenset), marker
    return {str(c) for c in value}


TABLES = [
    (doc.name, marker, codes)
    for doc in sorted(DOCS.glob("*.md"))
    for marker, codes in reason_tables(doc.read_text())
]


def test_the_docs_have_marked_tables_for_the_main_families() -> None:
    marked = {marker for _doc, marker, _codes in TABLES if marker}
    assert {
        "Verification",
        "DEAD_LETTER_REASONS",
        "Config",
        "Inject",
        "Store",
        "Outbox",
        "ProducePermanent",
        "Idempotency",
        "Saga",
        "Lab",
    } <= marked


@pytest.mark.parametrize(("doc", "marker", "codes"), TABLES, ids=[f"{d}:{m}" for d, m, _ in TABLES])
def test_a_docs_reason_table_matches_the_registry(
    doc: str, marker: str | None, codes: set[str]
) -> None:
    if marker is not None:
        assert codes == expected(marker), f"{doc}: table {marker} differs from the registry"
    unknown = {c for c in codes if not reasons.known(c)}
    assert not unknown, f"{doc}: codes not in pipeline.reasons: {sorted(unknown)}"


def test_derived_sets_are_derived_not_typed() -> None:
    order = list(reasons.Verification)
    assert (
        set(order[: order.index(reasons.Verification.SIGNER_MISMATCH) + 1]) == reasons.AUTHENTICITY
    )
    assert set(reasons.Verification) <= reasons.PERMANENT <= reasons.DEAD_LETTER_REASONS
    assert "EXPIRED" not in reasons.AUTHENTICITY  # an expired brief is authentic: FAILED goes back


def test_every_member_is_its_own_name() -> None:
    for family in reasons.FAMILIES.values():
        for member in family:
            assert member.value == member.name and member == member.name
