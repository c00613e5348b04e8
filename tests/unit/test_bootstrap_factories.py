"""bootstrap takes client and engine factories: a test passes its own, production the real ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from pipeline.bootstrap import Factories, build_relay
from pipeline.hooks import NO_HOOKS, hooks_from_fault
from pipeline.outbox import RowStatus, outbox, write
from pipeline.store import make_engine, session_factory


class ConfirmingProducer:
    """Confirms every record at once (a broker that always accepts)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self.produced: list[tuple[str, bytes | None]] = []
        self._reports: list[Any] = []

    def produce(
        self, topic: str, *, value: bytes | None, key: bytes | None, headers: Any, on_delivery: Any
    ) -> None:
        self.produced.append((topic, value))
        self._reports.append(on_delivery)

    def poll(self, _timeout: float) -> int:
        reports, self._reports = self._reports, []
        for report in reports:
            report(None, None)
        return len(reports)

    def flush(self, _timeout: float = 0) -> int:
        self.poll(0)
        return 0


def test_build_relay_uses_the_given_producer_and_engine_factories(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    made: list[ConfirmingProducer] = []
    engines: list[str] = []

    def producer(conf: dict[str, Any]) -> ConfirmingProducer:
        made.append(ConfirmingProducer(conf))
        return made[-1]

    def engine(u: str) -> Any:
        engines.append(u)
        return make_engine(u)

    relay = build_relay(
        url, bootstrap="nowhere:1", factories=Factories(producer=producer, engine=engine)
    )
    with session_factory(relay.engine).begin() as s:
        write(s, topic="t", key=b"k", value=b"v", branch_key="b")
    assert relay.drain() == 1
    relay.close()
    assert engines == [url] and made[0].produced == [("t", b"v")]
    assert made[0].conf["bootstrap.servers"] == "nowhere:1"
    with relay.engine.connect() as conn:
        assert conn.execute(select(outbox.c.status)).scalar_one() == RowStatus.SENT
    relay.engine.dispose()


def test_fault_hooks_are_parsed_at_the_edge_only() -> None:
    assert hooks_from_fault(None) is NO_HOOKS
    assert hooks_from_fault("crash_after_commit").fault_after_commit is not None
