"""Leaving the fleet for good (``fleet gateway leave``): tombstone every entry of one host.

A stopped gateway's entities are *away* for a grace (docs/presence.md "Away"): a stop is a
restart until shown otherwise. Leaving is explicit: once the host's gateway has stopped, the
roster is read to its end and every gid bound to the host -- its configured entities, the
workers it spawned, its host entry -- gets a tombstone signed with the host's key (only the
owner retracts, invariant 2). Peers then refuse sends to them ``UNKNOWN_RECIPIENT`` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.envelope import Signer
from pipeline.errors import DeliveryError
from pipeline.support.clock import now_ms

from .follower import RosterFollower
from .model import gateway_gid, tombstone_record
from .publisher import ProducerLike


def bound_to(follower: RosterFollower, host: str) -> list[str]:
    """Every gid the caught-up roster binds to ``host`` (live, away or lapsed), host entry last."""
    follower.catch_up()
    own = gateway_gid(host)
    gids = sorted(e.gid for e in follower.view.entries(include_stale=True) if e.host == host)
    return [g for g in gids if g != own] + [own]


def tombstone_all(
    producer: ProducerLike,
    gids: list[str],
    *,
    signer: Signer,
    follower: RosterFollower,
    timeout_s: float = 30.0,
    clock_ms: Callable[[], int] = now_ms,
) -> None:
    """Produce a signed tombstone per gid and wait until all are on the broker."""
    failed: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    topics = follower.topics
    for gid in gids:
        key, headers, _ = tombstone_record(gid, signer=signer, ts_ms=clock_ms(), topics=topics)
        producer.produce(
            topics.roster, key=key, value=None, headers=headers, on_delivery=on_delivery
        )
    left = producer.flush(timeout_s)
    if left or failed:
        raise DeliveryError(
            f"{left + len(failed)} of {len(gids)} tombstones not delivered ({failed[:1]})",
            retriable=True,
        )
