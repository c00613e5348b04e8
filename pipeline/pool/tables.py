"""The pool's tables: its effect log and one lanes row per running member.

A step's stored result is NOT here: it lives in ``fleet_idempotency`` (key class ``pool.<name>``,
key = the event id) through :mod:`pipeline.effects`, like every effect that happens once
(:mod:`.claims`).

- ``fleet_pool_effects``: the step's effect, one row per applied record, written in the batch
  transaction together with the runtime's dedupe row. It has NO unique key on the event id on
  purpose: a duplicate effect would be visible here (tests and the lab count them).
- ``fleet_pool_members``: what each member's lanes are doing, written by its heartbeat
  (:mod:`.heartbeat`) every beat: steps running and when the oldest started. ``fleet pool
  status --store-url`` reads it; a row whose beat is older than three periods is stale (its
  member died without a goodbye), a graceful stop deletes it.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Integer, String, Table, Text

from pipeline.store import metadata

effects_table = Table(
    "fleet_pool_effects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(255), nullable=False, index=True),
    Column("event_id", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("key", String(255)),
    Column("member", String(255), nullable=False),
    Column("started_ms", BigInteger, nullable=False),
    Column("ended_ms", BigInteger, nullable=False),
    Column("reused", Boolean, nullable=False),
    Column("result", Text, nullable=False),
)

members_table = Table(
    "fleet_pool_members",
    metadata,
    Column("pool", String(255), primary_key=True),
    Column("member", String(255), primary_key=True),
    Column("running", Integer, nullable=False),
    Column("oldest_started_ms", BigInteger, nullable=True),
    Column("beat_ms", BigInteger, nullable=False),
    Column("period_ms", Integer, nullable=False),
)
