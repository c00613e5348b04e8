"""Staged inserts (the lean batch) on SQLite and PostgreSQL: each table's rows go in with
one ``executemany`` whose parameters pass through every column's bind processor, and a row
missing a column with a Python-side default still gets that default."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table, TypeDecorator, select

from pipeline.runtime import Staged
from pipeline.store import make_engine, session_factory

pytestmark = pytest.mark.postgres


class _Upper(TypeDecorator[str]):
    """A type whose bind processor changes the value: the lean path must apply it."""

    impl = String(50)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else str(value).upper()


_md = MetaData()
_rows = Table(
    "staging_contract_rows",
    _md,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", _Upper()),
    Column("body", LargeBinary),
    Column("note", String(20), default="defaulted"),
)


@pytest.fixture
def engine(store_url: str) -> Any:
    engine = make_engine(store_url)
    _md.create_all(engine)
    yield engine
    _md.drop_all(engine)
    engine.dispose()


def test_staged_rows_go_in_with_bind_processors_and_python_defaults(engine: Any) -> None:
    tx = Staged()
    for i in range(3):
        tx.insert(_rows, {"name": f"n{i}", "body": bytes([i]) * 4, "note": "given"})
    tx.insert(_rows, {"name": "late", "body": None})  # "note" missing: its default applies
    tx.insert(_rows, {"body": b"\x00\xff", "name": None, "note": "other order"})
    with session_factory(engine).begin() as session:
        tx.flush(session)
    with engine.connect() as conn:
        got = conn.execute(
            select(_rows.c.name, _rows.c.body, _rows.c.note).order_by(_rows.c.id)
        ).all()
    assert [tuple(r) for r in got] == [
        ("N0", b"\x00" * 4, "given"),
        ("N1", b"\x01" * 4, "given"),
        ("N2", b"\x02" * 4, "given"),
        ("LATE", None, "defaulted"),
        (None, b"\x00\xff", "other order"),
    ]
