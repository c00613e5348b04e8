"""pipeline.support."""
