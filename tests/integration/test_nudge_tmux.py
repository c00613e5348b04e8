"""Hold and nudge into a real tmux pane, on a real broker (R-HOLD-2: "hold + nudge").

Host A's main has a tmux pane as its nudge target; host B's worker replies to it. Messages the
main's open pull takes are never nudged about; a message nobody pulls is, once per schedule.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from pipeline.bootstrap.gateway import build_gateway
from pipeline.envelope import Kind
from pipeline.gateway import render
from pipeline.host.entity_config import EntityConfig, InjectorSpec
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.roles import Delivery, Role
from pipeline.support.waiting import wait_until
from pipeline.testing import BrokerHandle
from tests.integration.fleet_hosts import Fleet
from tests.integration.test_gateway_flows import Recorder
from tests.integration.test_injectors_tmux import Tmux, tmux  # noqa: F401 (the fixture)

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.tmux,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def _config(host: str, fleet: Fleet, tmp_path: Path, *entities: EntityConfig) -> GatewayConfig:
    return GatewayConfig(
        host=host,
        bootstrap=fleet.bootstrap,
        store_url=f"sqlite:///{tmp_path / (host + '.sqlite')}",
        topic_prefix=fleet.prefix,
        presence_interval_s=1.0,
        presence_ttl_s=30.0,
        sweep_interval_s=0.5,
        nudge_initial_s=3600.0,  # one nudge per burst in this test: the second is an hour out
        nudge_max_s=3600.0,
        entities=entities,
    )


def test_a_held_message_nudges_the_mains_pane_but_an_open_pull_is_never_nudged(
    kafka: BrokerHandle,
    tmp_path: Path,
    tmux: Tmux,  # noqa: F811
) -> None:
    """R-HOLD-2: held + no open pull -> nudge through the nudge target; never while a pull
    is open. The pane shows exactly one nudge, for the message nobody was pulling."""
    fleet = Fleet.create(tmp_path, kafka.bootstrap, ("A", "B"))
    nudge = InjectorSpec(type="tmux", pane=tmux.pane, socket=tmux.socket)
    main = EntityConfig(gid="main-a", role=Role.MAIN, delivery=Delivery.PULL, nudge=nudge)
    worker = EntityConfig(
        gid="worker-b",
        role=Role.WORKER,
        delivery=Delivery.INJECT,
        injector=InjectorSpec(type="callback", callback="worker-b"),
    )
    a = build_gateway(
        _config("A", fleet, tmp_path, main), signer=fleet.signers["A"], trust=fleet.trust
    )
    b = build_gateway(
        _config("B", fleet, tmp_path, worker),
        signer=fleet.signers["B"],
        trust=fleet.trust,
        callbacks={"worker-b": Recorder()},
    )
    a.gateway.start()
    b.gateway.start()
    try:
        wait_until(lambda: b.client.knows("main-a"), timeout_s=30, what="presence of main-a")
        # 1) an open pull takes the first reply: no nudge may go out for it
        got: list[Any] = []
        puller = threading.Thread(target=lambda: got.extend(a.client.poll("main-a", wait_s=30)))
        puller.start()

        def pull_open() -> bool:
            with a.client.reads() as s:
                return a.client.conversations.has_open_pull(s, "main-a")

        wait_until(pull_open, timeout_s=20, what="the open pull")
        b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"first")
        puller.join(35)
        assert [m.body for m in got] == [b"first"]
        # 2) nobody pulls the second: the pane is nudged, once
        b.client.send(sender="worker-b", to="main-a", kind=Kind.REPLY, body=b"second")
        marker = "message is waiting for main-a"
        tmux.wait("the nudge", lambda: any(marker in line for line in tmux.lines()))
        nudges = [line for line in tmux.lines() if "[fleet]" in line and "$" in line]
        assert len(nudges) == 1, f"exactly one nudge (none during the open pull): {nudges}"
        assert render.nudge_text("main-a", 1, 0).split("(")[0] in nudges[0]
        sent = a.registry.get_sample_value("fleet_gateway_nudges_total", {"outcome": "sent"})
        assert sent == 1
        assert [m.body for m in a.client.poll("main-a")] == [b"second"]
    finally:
        a.gateway.stop()
        b.gateway.stop()
