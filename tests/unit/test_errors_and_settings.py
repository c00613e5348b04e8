"""The error root, outcome mapping and the one place ack settings are decided."""

from __future__ import annotations

import pytest

from pipeline.errors import BrokerError, ConfigError, EnvelopeError, FleetError
from pipeline.kafka.settings import OffsetReset, consumer_config, producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.runtime.decide import classify
from pipeline.runtime.outcomes import Quarantine, Retry


def test_retriable_flag_decides_the_outcome_not_the_class() -> None:
    assert isinstance(classify(BrokerError("down")), Retry)
    # not retriable: a permanent outcome (decide() makes it a DeadLetter where no order is kept)
    assert classify(FleetError("x", reason="CUSTOM", retriable=False)) == Quarantine(
        reason="CUSTOM", error="[CUSTOM] x"
    )
    assert isinstance(classify(FleetError("x", reason="CUSTOM", retriable=True)), Retry)
    assert isinstance(classify(ValueError("boom")), Retry)


def test_envelope_error_keeps_the_raw_record_for_the_dead_letter() -> None:
    raw = (b"k", [("kind", b"SEND")], b"body")
    err = EnvelopeError("bad", reason="SIG_INVALID", raw=raw)
    assert err.raw is raw and err.reason == "SIG_INVALID" and not err.retriable
    assert str(err) == "[SIG_INVALID] bad"


def test_consumer_never_autocommits_nor_resets_to_latest() -> None:
    conf = consumer_config("b:1", "g", instance_id="hostA")
    assert conf["enable.auto.commit"] is False
    assert conf["enable.auto.offset.store"] is False
    assert conf["auto.offset.reset"] in {"earliest", "error"}
    assert conf["group.instance.id"] == "hostA"
    assert (
        consumer_config("b:1", "g", offset_reset=OffsetReset.ERROR)["auto.offset.reset"] == "error"
    )


def test_producer_is_idempotent_acks_all_with_java_compatible_partitioner() -> None:
    conf = producer_config("b:1")
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert conf["partitioner"] == "murmur2_random"


def test_topic_names_reject_unsafe_host_ids() -> None:
    names = TopicNames(prefix="x.")
    assert names.inbox("host-1") == "x.inbox.host-1"
    with pytest.raises(ConfigError) as info:
        names.inbox("../etc")
    assert info.value.reason == "INVALID_NAME"
