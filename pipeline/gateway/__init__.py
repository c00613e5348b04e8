"""The per-host gateway: local entities, the inbox consumer and the dual ack model (seed 000 §5-§7)."""
