"""A main's face on the fabric: a stdio MCP server over the same client API as the CLI."""

from .server import MAX_WAIT_S, build_server

__all__ = ["MAX_WAIT_S", "build_server"]
