"""One consumer, several topics: hand each record to the handler of its topic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from sqlalchemy.orm import Session

from pipeline.record import Record
from pipeline.runtime.outcomes import DeadLetter, Outcome

from .batch_session import InTransaction
from .ports import Handler, Prepares, ReadsAhead, Verifies, Warms
from .staging import Staged


class ByTopic:
    """A :class:`Handler` that routes by ``record.topic`` (else ``default``): the gateway's one
    consumer reads its inbox and its control topic under one static membership."""

    def __init__(self, routes: Mapping[str, Handler], *, default: Handler) -> None:
        self.routes = dict(routes)
        self.default = default
        # which routes have a stage, asked once: ``isinstance`` on a runtime-checkable Protocol
        # inspects the object every time, and ``_split`` asks per record
        self._stages: dict[tuple[int, type], bool] = {}

    def handle(self, record: Record, tx: Staged) -> Outcome:
        return self.routes.get(record.topic, self.default).handle(record, tx)

    def verify(self, record: Record) -> DeadLetter | None:
        """The routed handler's verify stage (R-ENV-3: verify before dedupe); a route
        without one trusts its records, as the runtime does for such a handler."""
        route = self.routes.get(record.topic, self.default)
        return cast(Verifies, route).verify(record) if self._has(route, Verifies) else None

    def prepare(self, records: Sequence[Record]) -> None:
        """Each route's batch stage (if it has one) on its own records, in order."""
        for route, recs in self._split(records, Prepares):
            cast(Prepares, route).prepare(recs)  # _split kept only the routes that have it

    def read_ahead(self, tx: InTransaction, records: Sequence[Record]) -> None:
        """Each route's batch read (if it has one) on its own records, in order."""
        for route, recs in self._split(records, ReadsAhead):
            cast(ReadsAhead, route).read_ahead(tx, recs)

    def _has(self, route: Handler, stage: type) -> bool:
        has = self._stages.get((id(route), stage))
        if has is None:
            has = self._stages[(id(route), stage)] = isinstance(route, stage)
        return has

    def _split(self, records: Sequence[Record], stage: type) -> list[tuple[Handler, list[Record]]]:
        routes: dict[int, tuple[Handler, list[Record]]] = {}
        for rec in records:
            route = self.routes.get(rec.topic, self.default)
            if self._has(route, stage):
                found = routes.get(id(route))
                if found is None:
                    routes[id(route)] = (route, [rec])
                else:
                    found[1].append(rec)
        return list(routes.values())

    def warm(self, session: Session) -> None:
        for route in {id(r): r for r in (*self.routes.values(), self.default)}.values():
            if isinstance(route, Warms):
                route.warm(session)
