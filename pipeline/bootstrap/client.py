"""The composition root's client half: what a one-shot ``fleet send|ask|answer|abandon|poll|spawn``
process builds -- an engine on the host's store, a publisher signing with the host's key, a
client -- and where every builder's Kafka clients and engines come from (:class:`Factories`).

:mod:`pipeline.bootstrap` re-exports all of it. It lives apart so that such a process imports the
store and the envelope, not the gateway's whole graph (runtime, relay, presence follower, pools,
exporter): agents run these commands from their shells, and each call pays its imports
(docs/cli.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pipeline import schemas
from pipeline.control import spawns
from pipeline.control.client import ControlClient
from pipeline.errors import ConfigError, SecurityError
from pipeline.gateway.client import GatewayClient
from pipeline.host import roster_cache
from pipeline.host.outbound import Publisher
from pipeline.host.senders import LocalSenders
from pipeline.kafka.clients import ClientFactory, new_admin, new_consumer, new_producer
from pipeline.kafka.login_watch import LoginWatch
from pipeline.kafka.security import PLAINTEXT, KafkaSecurity
from pipeline.kafka.settings import admin_config, with_security
from pipeline.kafka.topics import TopicNames
from pipeline.store import make_engine, session_factory

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.envelope import Signer
    from pipeline.envelope.pairwise import Pairing
    from pipeline.gateway.metrics import GatewayMetrics
    from pipeline.host.gateway_config import GatewayConfig


@dataclass(frozen=True, kw_only=True)
class Factories:
    """Where Kafka clients and engines come from: the real ones unless a test passes its own.

    Every client a built process uses is made here: the runtime's and the roster follower's
    consumers, the relay's, presence's and dead-letter producers, the admin clients of the
    topology check and the lag reader. Each factory takes the client's librdkafka settings, so a
    wrapper (a secured cluster's extra settings, a fault-injecting fake) sees all of them. The
    defaults (``pipeline.kafka.clients``) load confluent_kafka only when a client is made: a
    ``fleet send`` makes none.

    ``security`` is the ``[kafka]`` table these factories apply; :meth:`secured` returns
    factories that put it on every client they build (``with_security``, the one place), and
    ``logins``, the :class:`~pipeline.kafka.login_watch.LoginWatch` on every such client: a
    long-running process subscribes to it to stop on a login refused after start.
    """

    producer: ClientFactory = field(default=new_producer)
    consumer: ClientFactory = field(default=new_consumer)
    admin: ClientFactory = field(default=new_admin)
    # make_engine's signature: (url, *, background_checkpoint=...) -> Engine
    engine: Callable[..., Engine] = field(default=make_engine)
    security: KafkaSecurity = PLAINTEXT
    logins: LoginWatch | None = None

    def store(self, config: GatewayConfig) -> Engine:
        """``config``'s store, from :attr:`engine`: on SQLite its WAL checkpointed as
        ``wal_checkpoint`` says (docs/store.md)."""
        if config.background_checkpoint:
            return self.engine(config.store_url)
        return self.engine(config.store_url, background_checkpoint=False)

    def secured(self, security: KafkaSecurity) -> Factories:
        """These factories with ``security`` applied to every producer, consumer and admin."""
        if security == self.security:
            return self
        if self.security != PLAINTEXT:
            raise ConfigError("these factories are already secured with another [kafka] table")
        p, c, a = self.producer, self.consumer, self.admin
        watch = LoginWatch(security)
        return replace(
            self,
            producer=lambda conf: p(watch.wrap(with_security(conf, security))),
            consumer=lambda conf: c(watch.wrap(with_security(conf, security))),
            admin=lambda conf: a(watch.wrap(with_security(conf, security))),
            security=security,
            logins=watch,
        )

    def on_login_refused(self, listener: Callable[[SecurityError], None]) -> None:
        """Call ``listener`` when any client of these factories has its login refused after
        start (AUTH_FAILED; docs/security.md). Plaintext factories have no login to refuse."""
        if self.logins is not None:
            self.logins.subscribe(listener)

    def check_access(self, bootstrap: str, *, timeout_s: float = 15.0) -> None:
        """Fail fast (AUTH_FAILED, TLS_FAILED, PROTOCOL_MISMATCH) when the cluster refuses our
        login, instead of letting librdkafka retry it for ever (``pipeline.kafka.refusals``)."""
        from pipeline.kafka.refusals import check_access  # loads librdkafka: only when asked

        check_access(
            admin_config(bootstrap),
            security=self.security,
            admin=self.admin,
            timeout_s=timeout_s,
        )


DEFAULT_FACTORIES = Factories()


def local_senders(config: GatewayConfig) -> LocalSenders:
    """Who this host signs for: its configured entities and the workers it spawned (store)."""
    return LocalSenders(
        host=config.host,
        configured=frozenset(e.gid for e in config.entities),
        spawned=spawns.is_local_worker,
    )


def build_client(
    config: GatewayConfig,
    *,
    signer: Signer,
    engine: Engine | None = None,
    factories: Factories = DEFAULT_FACTORIES,
    metrics: GatewayMetrics | None = None,
    pairing: Pairing | None = None,
    bindings: roster_cache.KnownBindings | None = None,
) -> GatewayClient:
    """A client for local entities of ``config.host`` (CLI `fleet send`/`poll`, MCP, libraries).
    ``pairing`` (the gateway's own, for its local socket): MAC conversation records for hosts
    that take them; a process without the roster in memory signs everything. ``bindings``
    (the gateway's own, whose maintenance writes the roster mirror): recipients resolved once
    per change of the mirror."""
    schemas.write_framing(config.body_framing)
    engine = engine or factories.store(config)
    topics = TopicNames(prefix=config.topic_prefix)
    return GatewayClient(
        sessions=session_factory(engine),
        publisher=Publisher(host=config.host, signer=signer, topics=topics, pairing=pairing),
        inject_deadline_s=config.inject_deadline_s,
        clock_skew_s=config.clock_skew_s,
        local_senders=local_senders(config),
        metrics=metrics,
        bindings=bindings,
    )


def build_control_client(
    config: GatewayConfig,
    *,
    signer: Signer,
    engine: Engine | None = None,
    factories: Factories = DEFAULT_FACTORIES,
) -> ControlClient:
    """The requester's control-plane API for local entities (``fleet spawn``, the MCP face)."""
    schemas.write_framing(config.body_framing)  # SPAWN / STOP bodies
    engine = engine or factories.store(config)
    topics = TopicNames(prefix=config.topic_prefix)
    return ControlClient(
        sessions=session_factory(engine),
        publisher=Publisher(host=config.host, signer=signer, topics=topics),
        deadline_s=config.spawn_deadline_s,
        local_senders=local_senders(config),
    )
