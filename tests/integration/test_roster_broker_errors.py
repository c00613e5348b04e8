"""Right after the roster topic is created its watermark read may fail with
NOT_LEADER_FOR_PARTITION (the new partition's leader is not known yet); a leader change in a
failover does the same at any time. The gateway waits such errors out instead of stopping; a
fatal one (authorization) stops it loudly. Real broker, the gateway built by bootstrap with only
the roster consumer's watermark read wrapped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from pipeline.bootstrap.client import Factories
from pipeline.bootstrap.gateway import build_gateway
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet

pytestmark = [pytest.mark.kafka]


class FailingWatermarks:
    """A real consumer whose first ``failures`` watermark reads fail with ``code``."""

    def __init__(self, conf: dict[str, Any], code: int, failures: int) -> None:
        self._inner = Consumer(conf)
        self.code, self.failures, self.calls = code, failures, 0

    def get_watermark_offsets(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return self._inner.get_watermark_offsets(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _gateway(kafka: BrokerHandle, tmp_path: Path, code: int, failures: int) -> Any:
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A",))
    cfg = GatewayConfig(
        host="A",
        bootstrap=kafka.bootstrap,
        store_url=f"sqlite:///{tmp_path / 'A.sqlite'}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        entities=(EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL),),
    )
    return build_gateway(
        cfg,
        signer=fleet.signers["A"],
        trust=fleet.trust,
        factories=Factories(consumer=lambda conf: _roster_wrapped(conf, code, failures)),
    )


def _roster_wrapped(conf: dict[str, Any], code: int, failures: int) -> Any:
    """The bootstrap's one consumer factory: only the roster follower's consumer is wrapped."""
    if "roster-reader." in conf["group.id"]:
        return FailingWatermarks(conf, code, failures)
    return Consumer(conf)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
    ],
    ids=lambda c: KafkaError(c).name(),
)
def test_the_gateway_waits_out_transient_roster_watermark_errors(
    kafka: BrokerHandle, tmp_path: Path, code: int
) -> None:
    parts = _gateway(kafka, tmp_path, code, failures=4)
    gw = parts.gateway.start()
    try:
        wait_until(
            lambda: parts.client.knows("main-a"), timeout_s=60, what="the gateway up, main-a live"
        )
        assert gw.fatal is None and not gw.stop_event.is_set()
        assert gw.status()["loops"]["inbox"]["alive"]
        got = parts.registry.get_sample_value(
            "fleet_roster_broker_errors_total", {"error_class": "transient"}
        )
        assert got is not None and got >= 4
    finally:
        gw.stop()


def test_an_authorization_error_stops_the_gateway_loudly(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    parts = _gateway(kafka, tmp_path, KafkaError.TOPIC_AUTHORIZATION_FAILED, failures=1)
    gw = parts.gateway.start()
    try:
        fatal = gw.wait()
        # a missing ACL has its own reason (docs/security.md); still fatal
        assert fatal is not None and getattr(fatal, "reason", "") == "NOT_AUTHORIZED"
        assert not getattr(fatal, "retriable", True)
        assert "TOPIC_AUTHORIZATION_FAILED" in str(fatal)
    finally:
        gw.stop()
