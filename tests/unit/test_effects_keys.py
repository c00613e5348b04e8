"""Idempotency keys and key classes: pure rules (R-EFF-1, R-EFF-4)."""

from __future__ import annotations

import pytest

from pipeline.effects import (
    KeyClass,
    key_from_identity,
    key_from_msg_id,
    payload_hash,
)
from pipeline.errors import ConfigError
from pipeline.reasons import Idempotency

DAY = 86_400


def test_seed_001_24h_keys_under_a_7_day_topic_are_refused() -> None:
    """R-EFF-4: 24 h keys, 7-day topic, a 48 h pause replays expired keys -> refused at config."""
    with pytest.raises(ConfigError) as err:
        KeyClass.for_topic("refunds", retention_s=DAY, topic_retention_ms=7 * DAY * 1000)
    assert err.value.reason == Idempotency.IDEM_RETENTION_SHORTER_THAN_REPLAY
    assert "24 h" in str(err.value) and "168 h" in str(err.value)
    ok = KeyClass.for_topic("refunds", retention_s=7 * DAY, topic_retention_ms=7 * DAY * 1000)
    assert ok.replay_window_s == 7 * DAY


def test_an_infinite_topic_needs_keys_kept_forever() -> None:
    with pytest.raises(ConfigError):
        KeyClass.for_topic("k", retention_s=365 * DAY, topic_retention_ms=-1)
    assert KeyClass.for_topic("k", retention_s=None, topic_retention_ms=-1).retention_s is None


def test_keys_derive_from_the_event_not_the_attempt() -> None:
    assert key_from_msg_id("m-1") == key_from_msg_id("m-1") == "m-1"
    assert key_from_msg_id("m-1", step="charge") == "m-1:charge"
    a = key_from_identity("refund", "order-9", 2)
    assert a == key_from_identity("refund", "order-9", "2")
    assert a != key_from_identity("refund", "order-9", 3)
    assert a.startswith("refund:") and len(a) <= 255
    with pytest.raises(ConfigError):
        key_from_msg_id("x" * 256)


def test_payload_hash_is_canonical() -> None:
    assert payload_hash({"a": 1, "b": 2}) == payload_hash({"b": 2, "a": 1})
    assert payload_hash(b"x") == payload_hash("x")
    assert payload_hash({"a": 1}) != payload_hash({"a": 2})
