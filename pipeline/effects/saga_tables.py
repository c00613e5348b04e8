"""The saga record: ONE row per saga, kept by the orchestrator (R-SAGA-1: prefer orchestration).

``fleet_saga`` -- ``state`` (:class:`SagaState`), ``step`` (0-based current step), ``phase``
(action or compensate), ``attempt`` (of the current command), ``payload`` and ``results`` (JSON),
``compensations`` (applied so far), ``deadline_ms`` (approval), ``error`` and ``history`` (JSON list
of what happened: the full state a person sees in the human queue). ``version`` counts updates.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, String, Table, Text

from pipeline.store import metadata

saga = Table(
    "fleet_saga",
    metadata,
    Column("saga_id", String(255), primary_key=True),
    Column("definition", String(100), nullable=False),
    Column("state", String(32), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("phase", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("results", Text, nullable=False),
    Column("compensations", Integer, nullable=False),
    Column("deadline_ms", BigInteger, nullable=True, index=True),
    Column("error", Text, nullable=True),
    Column("history", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
)
