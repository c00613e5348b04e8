"""The per-host gateway: local entities, the inbox consumer and the dual ack model (R-ACK, R-CONV)."""
