"""A gateway's presence, wired: the roster view and its follower, this host's presence
publisher, and the pairwise MAC mode when it is on (docs/presence.md, docs/envelope.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from prometheus_client import CollectorRegistry

from pipeline.envelope import Signer, TrustStore
from pipeline.envelope.pairwise import AgreementKey, Pairing
from pipeline.host.gateway_config import GatewayConfig
from pipeline.host.incarnation import take_incarnation
from pipeline.kafka.settings import producer_config
from pipeline.kafka.topics import TopicNames
from pipeline.presence import PresencePublisher, RosterFollower, RosterView
from pipeline.presence.follower import echo_slack_s
from pipeline.presence.metrics import PresenceMetrics
from pipeline.presence.model import SpawnProfile, gateway_gid
from pipeline.presence.publisher import ProducerLike

from .client import Factories

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker


def build_presence(
    config: GatewayConfig,
    factories: Factories,
    signer: Signer,
    trust: TrustStore,
    sessions: sessionmaker[Session],
    registry: CollectorRegistry,
) -> tuple[RosterView, RosterFollower, PresencePublisher, Pairing | None]:
    """The roster view and its follower, this host's presence publisher, and the pairwise MAC
    mode when it is on (its agreement key travels in the host entry)."""
    host, topics = config.host, TopicNames(prefix=config.topic_prefix)
    presence_metrics = PresenceMetrics(registry)
    roster = RosterView.build(trust=trust, topics=topics, skew_s=config.clock_skew_s)
    follower = RosterFollower(
        bootstrap=config.bootstrap,
        view=roster,
        topics=topics,
        metrics=presence_metrics,
        consumer_factory=factories.consumer,
        own_gid=gateway_gid(host),  # its host entry, heartbeated every presence interval
        echo_slack_s=echo_slack_s(
            ttl_s=config.presence_ttl_s, interval_s=config.presence_interval_s
        ),
    )
    presence = PresencePublisher(  # with the pairwise mode on, the host entry carries its key
        metrics=presence_metrics,
        producer=cast("ProducerLike", factories.producer(producer_config(config.bootstrap))),
        signer=signer,
        topics=topics,
        interval_s=config.presence_interval_s,
        ttl_s=config.presence_ttl_s,
        profiles=[SpawnProfile(name=p.name, description=p.description) for p in config.profiles],
        agreement_key=None
        if (pairing := _pairing(config, signer, roster, trust)) is None
        else pairing.own.public_bytes,
        # taken at the first heartbeat, above the store's count and what the roster holds then;
        # the presence loop takes a higher one if the caught-up roster outranks it
        incarnation=lambda: take_incarnation(sessions, host, seen=roster.incarnation_of(host)),
    )
    return roster, follower, presence, pairing


def _pairing(
    config: GatewayConfig, signer: Signer, roster: RosterView, trust: TrustStore
) -> Pairing | None:
    """The pairwise MAC mode (docs/envelope.md), when ``pairwise_mac`` is on: the agreement key
    derived from the host key, the peers' keys from signed presence, vouchers from the trust
    store. Off: every record is signed and a MAC'd one is refused (``MAC_NOT_ALLOWED``)."""
    if not config.pairwise_mac:
        return None
    return Pairing(own=AgreementKey.from_signer(signer), peers=roster, trusted=trust.lookup)
