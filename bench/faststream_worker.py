"""faststream's batch subscriber doing the bench's work; runs INSIDE the bench's own virtualenv.

Not part of the project: ``bench_runtime`` makes a virtualenv with faststream (never a project
dependency) and runs this file there. Work per batch, as in the other two contenders: one sqlite3
transaction doing insert-or-ignore of the dedupe rows and the effect rows, then the offset commit
(``AckPolicy.ACK``: acked after the handler returns). Prints one JSON line: records, wall and CPU
seconds (this process, every thread) from the first record to the last.

Usage: python faststream_worker.py BOOTSTRAP TOPIC GROUP DB N
"""

import asyncio
import json
import sqlite3
import sys
import time

from faststream import AckPolicy, FastStream
from faststream.confluent import KafkaBroker
from faststream.confluent.annotations import KafkaMessage

bootstrap, topic, group, db_path, n = sys.argv[1:6]
total = int(n)
db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
db.execute(
    "CREATE TABLE IF NOT EXISTS dedupe (scope TEXT, msg_id TEXT, PRIMARY KEY (scope, msg_id))"
)
db.execute("CREATE TABLE IF NOT EXISTS effect (id INTEGER PRIMARY KEY, msg_id TEXT, body BLOB)")

broker = KafkaBroker(bootstrap, config={"fetch.wait.max.ms": 10})
app = FastStream(broker)
state = {"seen": 0, "first": 0.0, "last": 0.0, "cpu0": 0.0, "cpu1": 0.0}
done = asyncio.Event()


@broker.subscriber(
    topic,
    group_id=group,
    batch=True,
    max_records=500,
    auto_offset_reset="earliest",
    ack_policy=AckPolicy.ACK,
    polling_interval=0.01,
)
async def handle(bodies: list[bytes], message: KafkaMessage) -> None:
    raws = message.raw_message if isinstance(message.raw_message, tuple) else (message.raw_message,)
    if not state["first"]:
        state["first"] = time.perf_counter()
        state["cpu0"] = time.process_time()
    db.execute("BEGIN")
    for raw in raws:
        msg_id = dict(raw.headers() or [])["msgId"].decode()
        cur = db.execute("INSERT OR IGNORE INTO dedupe VALUES ('bench', ?)", (msg_id,))
        if cur.rowcount:
            db.execute("INSERT INTO effect (msg_id, body) VALUES (?, ?)", (msg_id, raw.value()))
    db.execute("COMMIT")
    state["seen"] += len(raws)
    if state["seen"] >= total:
        state["last"] = time.perf_counter()
        state["cpu1"] = time.process_time()
        done.set()


async def main() -> None:
    async with broker:
        await broker.start()
        await asyncio.wait_for(done.wait(), timeout=600)
    print(
        json.dumps(
            {
                "records": state["seen"],
                "seconds": state["last"] - state["first"],
                "cpu_seconds": state["cpu1"] - state["cpu0"],
            }
        )
    )


asyncio.run(main())
