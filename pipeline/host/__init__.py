"""pipeline.host."""
