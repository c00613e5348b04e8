"""Every schema in schemas/ with two or more versions: the newest reader reads data written
with each older version (R-ENV-8: structured bodies evolve compatibly)."""

from __future__ import annotations

import random

import pytest
from fastavro.utils import generate_many

from pipeline import schemas

EVOLVED = sorted(
    (name, old)
    for name in schemas._index()
    for old in schemas.versions(name)
    if len(schemas.versions(name)) >= 2 and old < max(schemas.versions(name))
)


def test_at_least_one_schema_has_evolved() -> None:
    assert EVOLVED, "no schema has two versions: evolution is untested"


@pytest.mark.parametrize(("name", "old"), EVOLVED, ids=str)
def test_newest_reader_reads_every_older_writer(name: str, old: int) -> None:
    writer = schemas.versions(name)[old]
    _, reader = schemas.latest(name)
    random.seed(old)
    for record in generate_many(writer, 25):
        data = schemas.encode(name, record, version=old)
        assert data[:2] == bytes((schemas.MAGIC_V1, old))  # the default framing, v1
        got = schemas.decode(name, data)
        for field in writer["fields"]:  # every field the old writer had survives unchanged
            assert got[field["name"]] == record[field["name"]]
        new_fields = {f["name"] for f in reader["fields"]} - {f["name"] for f in writer["fields"]}
        for f in reader["fields"]:
            if f["name"] in new_fields:
                assert got[f["name"]] == f["default"]  # a new field takes its default


@pytest.mark.parametrize("name", sorted(schemas._index()))
def test_every_schema_round_trips_and_rejects_truncation(name: str) -> None:
    from pipeline.errors import EnvelopeError

    _, schema = schemas.latest(name)
    for record in generate_many(schema, 5):
        data = schemas.encode(name, record)
        assert schemas.decode(name, data) == record
        if len(data) > 3:
            with pytest.raises(EnvelopeError) as info:
                schemas.decode(name, data[:-1])
            assert info.value.reason == "SCHEMA_INVALID"
