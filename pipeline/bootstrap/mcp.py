"""The MCP server for one main, over its gateway client."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.bootstrap.client import (
    DEFAULT_FACTORIES,
    build_client,
    build_control_client,
)
from pipeline.control.socket_first import SocketFirstControl
from pipeline.envelope import Signer
from pipeline.errors import ConfigError
from pipeline.gateway.socket_first import SocketFirst
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.model import Delivery
from pipeline.reasons import Config

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def build_mcp_server(
    config: GatewayConfig, *, signer: Signer, gid: str, trace_default: str | None = None
) -> MCPServer:
    """The stdio MCP server of main ``gid`` (``fleet mcp --as``): a pull entity of this host."""
    from pipeline.mcp import build_server

    entity = next((e for e in config.entities if e.gid == gid), None)
    if entity is None or entity.delivery is not Delivery.PULL:
        what = "not an entity" if entity is None else "an inject entity, not a pull entity"
        raise ConfigError(
            f"--as {gid}: {what} of host {config.host}; a main over MCP is a local pull entity",
            reason=Config.CONFIG_INVALID,
            context={"key": "as", "value": gid},
        )
    engine = DEFAULT_FACTORIES.store(config)  # its WAL checkpointed as wal_checkpoint says
    client = build_client(config, signer=signer, engine=engine)
    return build_server(
        client,
        gid=gid,
        control=SocketFirstControl(
            config.local_socket, build_control_client(config, signer=signer, engine=engine)
        ),
        writer=SocketFirst(config.local_socket, client),
        trace_default=trace_default,
    )
