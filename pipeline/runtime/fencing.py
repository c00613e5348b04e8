"""Fenced by itself or by a second member: a static member's one question after a fencing.

A static member fenced right after timing out its own session was fenced by itself
(:class:`pipeline.kafka.logs.ClientLog`): the loop re-joins with a fresh client instead of
stopping. Any other fencing is a second member with our ``group.instance.id``, and stops it.
"""

from __future__ import annotations

from typing import Any

from pipeline.kafka.logs import ClientLog

# Fenced within this long after the client's own session timeout = fenced by itself.
SELF_FENCE_WINDOW_S = 30.0


def fenced_by_itself(client_log: ClientLog, was: str | None, consumer: Any) -> bool:
    """A static member's fencing came from its own client: it timed out its session
    (``SESSTMOUT``) lately, or its member id is no longer the one it was assigned under
    (``was``) -- librdkafka re-joined on its own. The second check is needed because the
    client's log lines reach us only through ``poll``: a synchronous commit that blocked through
    a broker outage comes back fenced before the session timeout's line was served (the
    ``broker-down`` chaos scenario). A second member with our id leaves our member id as it was
    (measured: a fenced client's ``memberid()`` is unchanged, before and after its fatal
    error)."""
    timed_out = client_log.timed_out_within(SELF_FENCE_WINDOW_S)
    now = member_id(consumer)
    # "" now: the client dropped its member id to re-join (after a session timeout that may
    # lie minutes back, when the broker was away longer than that: the ``broker-down`` chaos
    # scenario, 75 s)
    moved = bool(was) and now is not None and now != was
    return timed_out or moved


def member_id(consumer: Any) -> str | None:
    """The client's group member id; ``""`` when it has none (librdkafka dropped it to re-join
    on its own: confluent-kafka answers None then), None when it cannot say (a closed client)."""
    try:
        member = consumer.memberid()
    except Exception:  # noqa: BLE001 - a closed client, or one without the call
        return None
    return member if isinstance(member, str) else ""
