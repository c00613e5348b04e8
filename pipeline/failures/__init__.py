"""Failure handling: handler outcomes, retries, dead letters, per-key quarantine."""
