"""Run journal tables (R-OUT): a run, its branches, and one state row per step."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Integer, String, Table, Text

from pipeline.store import metadata

run = Table(
    "run",
    metadata,
    Column("tenant", String(100), primary_key=True),
    Column("run_id", String(100), primary_key=True),
    Column("live_branch", Integer, nullable=False),
    Column("status", String(20), nullable=False),  # running | completed
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

run_branch = Table(
    "run_branch",
    metadata,
    Column("tenant", String(100), primary_key=True),
    Column("run_id", String(100), primary_key=True),
    Column("branch", Integer, primary_key=True),
    Column("branch_key", String(300), nullable=False, unique=True),
    Column("parent", Integer, nullable=True),
    Column("fork_step", Integer, nullable=False),
    Column("live", Boolean, nullable=False),
)

run_step = Table(
    "run_step",
    metadata,
    Column("tenant", String(100), primary_key=True),
    Column("run_id", String(100), primary_key=True),
    Column("branch", Integer, primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("state", Text, nullable=False),
    Column("lsn", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
)
