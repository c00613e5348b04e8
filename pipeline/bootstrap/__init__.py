"""The composition root: the one place concrete objects are built and wired.

Entry points (CLI, demo, tests) call :func:`build_gateway`, :func:`build_client`,
:func:`build_relay`, :func:`build_failed_reporter` and :func:`build_exporter`; they only parse
arguments. Kafka clients and engines come from a :class:`Factories` (tests pass their own), test
hooks from one :class:`~pipeline.hooks.Hooks`. Nothing here reads the environment or files beyond
what the frozen configs name.

The client half (:func:`build_client`, :func:`build_control_client`, :class:`Factories`) lives in
:mod:`pipeline.bootstrap_client` and is re-exported here: a one-shot ``fleet send`` imports that
module alone, not the graph this one wires.
"""

from __future__ import annotations

from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.bootstrap.mcp import build_mcp_server
from pipeline.bootstrap.pools import PoolMember, build_pool_member
from pipeline.bootstrap.reporters import (
    build_exporter,
    build_failed_reporter,
    build_plain_reporter,
    build_relay,
)
from pipeline.bootstrap.sagas import SagaProcess, build_saga_process
from pipeline.bootstrap_client import (  # the client half, re-exported (see the docstring)
    DEFAULT_FACTORIES,
    Factories,
    build_client,
    build_control_client,
)

__all__ = [
    "DEFAULT_FACTORIES",
    "Factories",
    "GatewayParts",
    "PoolMember",
    "SagaProcess",
    "build_client",
    "build_control_client",
    "build_exporter",
    "build_failed_reporter",
    "build_gateway",
    "build_mcp_server",
    "build_plain_reporter",
    "build_pool_member",
    "build_relay",
    "build_saga_process",
]
