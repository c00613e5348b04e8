"""One consumer, several topics: hand each record to the handler of its topic."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.failures.outcomes import Outcome
from pipeline.record import Record

from .ports import Handler
from .staging import Staged


class ByTopic:
    """A :class:`Handler` that routes by ``record.topic`` (else ``default``): the gateway's one
    consumer reads its inbox and its control topic under one static membership."""

    def __init__(self, routes: Mapping[str, Handler], *, default: Handler) -> None:
        self.routes = dict(routes)
        self.default = default

    def handle(self, record: Record, tx: Staged) -> Outcome:
        return self.routes.get(record.topic, self.default).handle(record, tx)
