"""The SQL store: one MetaData, one engine factory; tables live beside the subsystem using them."""

from .engine import make_engine, metadata, read_sessions, readonly, session_factory

__all__ = ["make_engine", "metadata", "read_sessions", "readonly", "session_factory"]
