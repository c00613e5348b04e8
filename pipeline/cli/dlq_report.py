"""Wiring for ``fleet dlq report``: the real (signing) reporter from a host config, the plain
test reporter from flags, and the optional in-process relay.

Who ships the reporter's FAILEDs: they are outbox rows in the reporting host's store, so **that
host's gateway relay ships them** (it drains the whole store). ``--relay`` runs a relay here
instead, for a reporting host whose gateway is not running; never both on one store (two relays
send every row twice -- harmless to the receivers' dedupe, but wasteful).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from pipeline.errors import ConfigError
from pipeline.failures.reporter import FailedReporter
from pipeline.outbox import backlog
from pipeline.reasons import Config

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from pipeline.bootstrap.client import Factories
    from pipeline.retention import RetentionConfig


def configured_reporter(
    config: Path,
    *,
    group: str | None,
    dlq_topic: str | None,
    factories: Factories,
    registry: CollectorRegistry | None = None,
) -> tuple[FailedReporter, RetentionConfig]:
    """The reporter of the host ``config`` describes: signs with its key, writes its outbox;
    with the host's ``[retention]``."""
    from pipeline.bootstrap.reporters import build_failed_reporter
    from pipeline.envelope import Signer, TrustStore
    from pipeline.host.config import load_config

    cfg = load_config(config)
    if not cfg.key_file or not cfg.trust_dir:
        raise ConfigError(
            f"{config}: the reporter signs its FAILEDs: key_file and trust_dir must be set",
            reason=Config.CONFIG_MISSING_KEY,
        )
    reporter = build_failed_reporter(
        cfg,
        signer=Signer.load(cfg.key_file),
        trust=TrustStore.load(cfg.trust_dir),
        group=group,
        dlq_topic=dlq_topic,
        registry=registry,
        factories=factories,  # build_failed_reporter adds the fleet.toml's [kafka] login
    )
    return reporter, cfg.retention


def plain_reporter(
    bootstrap: str | None,
    store_url: str | None,
    sink_topic: str | None,
    *,
    prefix: str,
    dlq_topic: str | None,
    group: str | None,
    factories: Factories,
    registry: CollectorRegistry | None = None,
) -> FailedReporter:
    """The unsigned plain-record sink (tests and local runs)."""
    if not (bootstrap and store_url and sink_topic):
        raise ConfigError(
            "give --config fleet.toml, or --bootstrap, --store-url and --sink-topic (the test sink)",
            reason=Config.CONFIG_MISSING_KEY,
        )
    from pipeline.bootstrap.reporters import build_plain_reporter

    return build_plain_reporter(
        bootstrap=bootstrap,
        store_url=store_url,
        sink_topic=sink_topic,
        prefix=prefix,
        dlq_topic=dlq_topic,
        group=group,
        registry=registry,
        factories=factories,
    )


@dataclass
class ReporterRelay:
    """``--relay``: an outbox relay thread beside the reporter, stopped after a last drain."""

    engine: Engine
    stop: threading.Event
    thread: threading.Thread
    wake: Callable[[], None]  # the relay's: its idle wait looks at ``stop`` only when woken

    @classmethod
    def start(cls, engine: Engine, config: Path, *, factories: Factories) -> ReporterRelay:
        from pipeline.bootstrap.reporters import build_relay
        from pipeline.host.config import load_config

        cfg = load_config(config)
        factories = factories.secured(cfg.kafka)  # the host's [kafka] login
        relay = build_relay("", bootstrap=cfg.bootstrap, engine=engine, factories=factories)
        stop = threading.Event()
        thread = threading.Thread(target=relay.run_forever, args=(stop,), name="relay", daemon=True)
        thread.start()
        return cls(engine=engine, stop=stop, thread=thread, wake=relay.wake)

    def finish(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) until the outbox is empty, then stop; what is left ships next run."""
        deadline = time.monotonic() + timeout_s
        while backlog(self.engine)[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        self.stop.set()
        self.wake()
        self.thread.join(timeout_s)
