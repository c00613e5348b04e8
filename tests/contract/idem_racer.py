"""Child process for the idempotency contract tests: ``python -m tests.contract.idem_racer``.

``race URL N START`` -- wait until wall time START, then reserve keys 0..N-1 (one transaction
each: reserve, effect row, complete) and print the keys this process got as FirstUse (JSON).
``crash URL KEY`` -- reserve KEY, write the effect row, then SIGKILL itself before the commit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from sqlalchemy import Column, Integer, MetaData, String, Table, insert

from pipeline.effects import FirstUse, IdempotencyStore, KeyClass
from pipeline.store import make_engine, session_factory

effects_meta = MetaData()
effect_rows = Table(
    "test_effect_rows",
    effects_meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idem_key", String(255), nullable=False),
    Column("writer", String(64), nullable=False),
)
KEY_CLASS = KeyClass(name="test", retention_s=None, replay_window_s=None)


def apply_once(sessions, store: IdempotencyStore, key: str, writer: str) -> bool:  # type: ignore[no-untyped-def]
    with sessions.begin() as s:
        answer = store.reserve(s, key, {"key": key}, key_class="test")
        if not isinstance(answer, FirstUse):
            return False
        s.execute(insert(effect_rows).values(idem_key=key, writer=writer))
        store.complete(s, key, {"writer": writer}, key_class="test")
        return True


def main() -> None:
    mode, url = sys.argv[1], sys.argv[2]
    engine = make_engine(url)
    effects_meta.create_all(engine)
    sessions = session_factory(engine)
    store = IdempotencyStore([KEY_CLASS])
    writer = f"pid{os.getpid()}"
    if mode == "race":
        n, start = int(sys.argv[3]), float(sys.argv[4])
        while time.time() < start:
            time.sleep(0.001)
        won = [f"k{i}" for i in range(n) if apply_once(sessions, store, f"k{i}", writer)]
        print(json.dumps(won), flush=True)
    elif mode == "crash":
        key = sys.argv[3]
        session = sessions()
        session.begin()
        assert isinstance(store.reserve(session, key, {"key": key}, key_class="test"), FirstUse)
        session.execute(insert(effect_rows).values(idem_key=key, writer=writer))
        store.complete(session, key, {"writer": writer}, key_class="test")
        session.flush()
        print("effect-written", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # between the effect and the commit


if __name__ == "__main__":
    main()
