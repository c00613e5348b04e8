"""Tables for per-key quarantine, on the shared :data:`pipeline.store.metadata`.

Scope columns (``grp``, ``topic``) are the consumer group and the source topic (or ``*`` for a
scope covering all of a group's topics): the state belongs to the group, not to a process or a
partition assignment, so it survives a restart and a partition moving to another member.
``src_topic`` is the topic the record itself came from.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Integer,
    LargeBinary,
    String,
    Table,
    UniqueConstraint,
)

from pipeline.store import metadata

quarantine_table = Table(
    "fleet_quarantine",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("grp", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("key", String(512), nullable=False),
    Column("src_topic", String(255), nullable=False),  # the record's topic (scope topic may be "*")
    Column("partition", Integer, nullable=False),  # where the key lives: who may release it
    Column("reason", String(64), nullable=False),
    Column("dead_letter_ref", String(512), nullable=False),
    Column("quarantined_ms", BigInteger, nullable=False),
    UniqueConstraint("grp", "topic", "key", name="uq_fleet_quarantine_scope_key"),
)

parked_table = Table(
    "fleet_parked",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("grp", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("key", String(512), nullable=False),
    Column("seq", Integer, nullable=False),  # per-key order; 0 is the dead-lettered record
    Column("dead_letter", Boolean, nullable=False),
    Column("src_topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("timestamp_ms", BigInteger, nullable=False),
    Column("record_key", LargeBinary, nullable=True),
    Column("headers", LargeBinary, nullable=False),  # pipeline.record_headers form, order kept
    Column("value", LargeBinary, nullable=True),
    Column("parked_ms", BigInteger, nullable=False),
    UniqueConstraint("grp", "topic", "key", "seq", name="uq_fleet_parked_key_seq"),
    # a redelivered record (crash before the offset commit) is parked once, not twice
    UniqueConstraint(
        "grp", "topic", "src_topic", "partition", "offset", name="uq_fleet_parked_position"
    ),
)

release_table = Table(
    "fleet_release_request",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("grp", String(255), nullable=False),
    Column("topic", String(255), nullable=False),
    Column("key", String(512), nullable=False),
    Column("state", String(16), nullable=False),  # PENDING | DONE | FAILED
    Column("requested_ms", BigInteger, nullable=False),
    Column("completed_ms", BigInteger, nullable=True),
    Column("note", String(1024), nullable=False, default=""),
)
