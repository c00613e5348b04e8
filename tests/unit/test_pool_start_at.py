"""``fleet pool run --start-at``: a member stopped while it waits never joins its group."""

from __future__ import annotations

import threading
from typing import Any
from unittest import mock

from pipeline.bootstrap.pools import PoolMember


def test_a_member_stopped_while_waiting_to_join_never_subscribes() -> None:
    """docs/pools.md: "a SIGTERM while it waits stops it without joining". Before the fix the
    member went on into ``runtime.run`` -- subscribe, then close at once -- and a JoinGroup
    completed after the close left a ghost member in the group (seen in CI)."""
    runtime: Any = mock.Mock(inflight=mock.Mock())
    member = PoolMember(
        runtime=runtime,
        handler=mock.Mock(),
        engine=mock.Mock(),
        registry=mock.Mock(),
        metrics=mock.Mock(),
        heartbeat=mock.Mock(),
    )
    stop = threading.Event()
    stop.set()
    member.run(stop, join_at=4_000_000_000.0)
    runtime.warm_up.assert_called_once()
    runtime.run.assert_not_called()
    runtime.subscribe.assert_not_called()
    member.heartbeat.start.assert_not_called()
    runtime.close.assert_called_once()
    runtime.inflight.close.assert_called_once()
