"""A worker spawned on this host is a local sender while it lives (R-ENV-7).

The sender check reads the host's store (``fleet_spawns``), so ``fleet send`` in the worker's
own process -- not just the gateway -- admits it, and refuses it once it is stopped or reaped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session, sessionmaker

from pipeline.bootstrap.client import build_client, build_control_client
from pipeline.control import spawns
from pipeline.envelope import Signer
from pipeline.errors import DeliveryError
from pipeline.host import roster_cache
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.model import Delivery, Role
from pipeline.store import make_engine, session_factory

FAR = 10**15


def _spawned(sessions: sessionmaker[Session], gid: str, state: str) -> None:
    with sessions.begin() as s:
        s.execute(
            insert(spawns.spawns_table).values(
                spawn_id=gid, request_msg_id=f"m-{gid}", requester="main-a",
                requester_host="A", profile="shell", state=state, created_ms=1,
            )
        )  # fmt: skip


@pytest.mark.parametrize(
    ("state", "admitted"),
    [(spawns.LIVE, True), (spawns.LAUNCHING, True), (spawns.REAPED, False),
     (spawns.FAILED, False), (spawns.REFUSED, False)],
)  # fmt: skip
def test_a_spawned_worker_sends_while_it_lives(tmp_path: Path, state: str, admitted: bool) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'B.sqlite'}")
    sessions = session_factory(engine)
    with sessions.begin() as s:
        roster_cache.replace_all(
            s, [roster_cache.RosterEntry("main-a", "A", "main", "pull", (), FAR)]
        )
    _spawned(sessions, "w-1", state)
    cfg = GatewayConfig(
        host="B",
        entities=(EntityConfig(gid="main-b", role=Role.MAIN, delivery=Delivery.PULL),),
    )
    client = build_client(cfg, signer=Signer.generate("B"), engine=engine)
    if admitted:
        env = client.send(sender="w-1", to="main-a", body=b"done")
        assert env.sender == "w-1"
    else:
        with pytest.raises(DeliveryError) as err:
            client.send(sender="w-1", to="main-a", body=b"done")
        assert err.value.reason == "NOT_LOCAL_SENDER"
    assert client.send(sender="main-b", to="main-a", body=b"x").sender == "main-b"
    with pytest.raises(DeliveryError) as err:
        client.send(sender="w-nobody", to="main-a", body=b"x")
    assert err.value.reason == "NOT_LOCAL_SENDER"
    with pytest.raises(DeliveryError) as err:
        client.broadcast(sender="w-nobody", group="all", body=b"x")
    assert err.value.reason == "NOT_LOCAL_SENDER"
    control = build_control_client(cfg, signer=Signer.generate("B"), engine=engine)
    with pytest.raises(DeliveryError) as err:
        control.spawn(requester="w-nobody", host="A", profile="shell")
    assert err.value.reason == "NOT_LOCAL_SENDER"
    engine.dispose()
