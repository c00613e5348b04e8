"""``fleet pool submit``: one record per input line, keyed, each with a fresh ``msgId`` (the event
id the pool dedupes on and stores the step result against): a version-7 UUID's hex, as the
envelope mints one, so the pool's dedupe and step-result keys grow at one edge (docs/store.md,
"Time-ordered msgIds")."""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.envelope.model import new_msg_id
from pipeline.errors import BrokerError
from pipeline.kafka.clients import ClientFactory, new_producer
from pipeline.kafka.settings import producer_config
from pipeline.support import clock


def parse_line(line: str, *, key: str | None) -> tuple[str | None, str]:
    """``key<TAB>body``, or the whole line as the body when ``key`` is given (or no tab)."""
    line = line.rstrip("\n")
    if key is not None:
        return key, line
    k, sep, body = line.partition("\t")
    return (k, body) if sep else (None, line)


def submit(
    bootstrap: str,
    topic: str,
    lines: Iterable[str],
    *,
    key: str | None = None,
    producer_factory: ClientFactory = new_producer,
) -> list[str]:
    """Produce every non-empty line; returns the msgIds, after the broker confirmed all."""
    producer = producer_factory(producer_config(bootstrap))
    failures: list[str] = []

    def _report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    ids: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        k, body = parse_line(line, key=key)
        msg_id = new_msg_id(clock.now_ms())
        producer.produce(
            topic,
            value=body.encode(),
            key=k.encode() if k is not None else None,
            headers=[("msgId", msg_id.encode())],
            on_delivery=_report,
        )
        producer.poll(0)
        ids.append(msg_id)
    left = producer.flush(30)
    if left or failures:
        raise BrokerError(f"{left} record(s) unconfirmed, {len(failures)} failed: {failures[:3]}")
    return ids
