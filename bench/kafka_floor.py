"""The floor under the latency rows: bare Kafka hops at the same offered rate, in the same run.

``bench.latency`` times send -> held (one Kafka hop between two gateway processes, with a store
commit on each side) and send -> INJECTED (two hops: the brief there, its receipt back, plus an
inject). This measures the same hops with nothing of ours on them: a paced producer in this
process, built from the fabric's own ``producer_config`` (idempotent, ``acks=all``, the same
``linger.ms``), sends to a consumer in its own process (``consumer_config``: ``read_committed``,
manual commits); that process forwards every other record to a second topic (what a receipt
does), read back here. Values carry the producer's wall clock, so:

* ``one_hop_ms`` -- produce() call -> the far process's ``poll()`` returns it (all records);
* ``round_trip_ms`` -- produce() call -> the echo arrives back here (the echoed half).

Same broker, same machine, same rate: a pipeline stage cannot be faster than the hop it rides on,
so its p99 over the floor's p99 says how much of the latency is ours.

:func:`cpu_per_message` is the CPU side of the same floor: a paced producer process and a
consumer process (each alone in its process, the fabric's client settings; the consumer takes
batches and commits asynchronously, as the pull path does), each reporting its own process CPU
(librdkafka's threads included) per record. Run alone:
``python -m bench.kafka_floor [--rate R] [--seconds S] [--cpu]`` (``KAFKA_BOOTSTRAP`` or a local
broker).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from .broker import kafka, local_pid
from .histogram import Histogram

PARTITIONS = 12


def _make_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, PARTITIONS, -1) for n in names]).values():
        f.result(30)


def _delete_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics(names).values():
        with contextlib.suppress(Exception):  # best effort: leave no litter we can help
            f.result(30)


def _consumer(bootstrap: str, topic: str) -> Any:
    from confluent_kafka import Consumer

    from pipeline.kafka.settings import consumer_config

    c = Consumer(consumer_config(bootstrap, f"{topic}-g"))
    c.subscribe([topic])
    return c


def _far(bootstrap: str, there: str, back: str, expect: int) -> None:
    """The far process: consume ``there``, echo every other record to ``back``, report the
    one-hop histogram on stdout. Prints ``ready`` once it holds its partitions."""
    from confluent_kafka import Producer

    from pipeline.kafka.settings import producer_config

    consumer = _consumer(bootstrap, there)
    producer = Producer(producer_config(bootstrap))
    hop = Histogram()
    announced = False
    seen = 0
    deadline = None
    while seen < expect:
        msg = consumer.poll(0.05)
        if not announced and consumer.assignment():
            print("ready", flush=True)
            announced = True
        if msg is None or msg.error():
            if deadline is not None and time.monotonic() > deadline:
                break
            continue
        now = time.time() * 1000
        sent_ms, index = msg.value().split(b" ")
        if index == b"warm":
            producer.produce(back, value=msg.value(), key=msg.key())
            producer.poll(0)
            continue
        deadline = deadline or time.monotonic() + 120
        seen += 1
        hop.record_ms(now - float(sent_ms))
        if int(index) % 2:
            producer.produce(back, value=msg.value(), key=msg.key())
            producer.poll(0)
    producer.flush(10)
    consumer.close()
    print(json.dumps(hop.summary_ms()), flush=True)


def _sink(bootstrap: str, topic: str, expect: int) -> None:
    """Consume ``expect`` records in batches, committing asynchronously; print the process CPU
    from the first record to the last."""
    consumer = _consumer(bootstrap, topic)
    announced = False
    seen = first = 0
    cpu0 = 0.0
    deadline = time.monotonic() + 180
    while seen < expect and time.monotonic() < deadline:
        batch = consumer.consume(500, 0.05)
        if not announced and consumer.assignment():
            print("ready", flush=True)
            announced = True
        records = [m for m in batch if not m.error() and m.value() != b"warm"]
        if not records:
            continue
        if not seen:  # the clock starts after the first batch: it is left out of the count
            cpu0, first = time.process_time(), len(records)
        seen += len(records)
        consumer.commit(asynchronous=True)
    cpu = time.process_time() - cpu0
    consumer.close()
    print(json.dumps({"cpu_s": cpu, "n": seen - first}), flush=True)


def _source(bootstrap: str, topic: str, total: int, rate: int) -> None:
    """Produce ``total`` records paced at ``rate`` (one sleep per record), flush; print the
    process CPU of the produce loop and the flush."""
    from confluent_kafka import Producer

    from pipeline.kafka.settings import producer_config

    producer = Producer(producer_config(bootstrap))
    for p in range(PARTITIONS):  # metadata and connections before the clock starts
        producer.produce(topic, value=b"warm", partition=p)
    producer.flush(30)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, value=b"%.3f %d" % (time.time() * 1000, i), key=b"%d" % (i % 64))
        producer.poll(0)
    producer.flush(30)
    cpu = time.process_time() - cpu0
    print(json.dumps({"cpu_s": cpu, "n": total, "wall_s": time.perf_counter() - t0}), flush=True)


def cpu_per_message(bootstrap: str, *, rate: int = 500, seconds: float = 10.0) -> dict[str, Any]:
    """µs of CPU per record of a paced producer process and of a consumer process, and of the
    broker over the same window when it runs on this machine (its share of a bare record: the
    produce, the fetch and the consumer's offset commits)."""
    from pipeline.support import procfs

    from .cpu import us_per_message

    broker = local_pid(bootstrap)

    tag = uuid.uuid4().hex[:8]
    topic = f"floorcpu{tag}"
    _make_topics(bootstrap, [topic])
    total = int(rate * seconds)
    me = [sys.executable, "-m", "bench.kafka_floor"]
    sink = subprocess.Popen(
        [*me, "--sink", bootstrap, topic, str(total)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert sink.stdout is not None
        if sink.stdout.readline().strip() != "ready":
            raise RuntimeError("the consumer never got its partitions")
        broker_t0 = procfs.cpu_s(broker) if broker is not None else None
        source = subprocess.run(
            [*me, "--source", bootstrap, topic, str(total), str(rate)],
            capture_output=True,
            text=True,
            timeout=seconds * 4 + 120,
            check=True,
        )
        made = json.loads(source.stdout.strip().splitlines()[-1])
        out, _ = sink.communicate(timeout=180)
        took = json.loads(out.strip().splitlines()[-1])
        broker_t1 = procfs.cpu_s(broker) if broker is not None else None
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(10)
        _delete_topics(bootstrap, [topic])
    return {
        "offered_msg_per_s": rate,
        "records": total,
        "consumed": took["n"],
        "produce_us_per_msg": us_per_message(made["cpu_s"], made["n"]),
        "consume_us_per_msg": us_per_message(took["cpu_s"], took["n"]),
        "broker_us_per_msg": (
            us_per_message(broker_t1 - broker_t0, took["n"])
            if broker_t0 is not None and broker_t1 is not None
            else None
        ),
    }


def measure(bootstrap: str, *, rate: int = 500, seconds: float = 10.0) -> dict[str, Any]:
    """One paced run of ``rate * seconds`` records: one-hop and round-trip histograms."""
    from confluent_kafka import Producer

    from pipeline.kafka.settings import producer_config

    tag = uuid.uuid4().hex[:8]
    there, back = f"floor{tag}.there", f"floor{tag}.back"
    _make_topics(bootstrap, [there, back])
    total = int(rate * seconds)
    far = subprocess.Popen(
        [sys.executable, "-m", "bench.kafka_floor", "--far", bootstrap, there, back, str(total)],
        stdout=subprocess.PIPE,
        text=True,
    )
    trip = Histogram()
    got: list[int] = []
    stop = threading.Event()
    echoed = threading.Event()
    home = _consumer(bootstrap, back)

    def read_back() -> None:
        while not stop.is_set():
            msg = home.poll(0.05)
            if msg is None or msg.error():
                continue
            now = time.time() * 1000
            sent_ms, index = msg.value().split(b" ")
            if index == b"warm":
                echoed.set()
                continue
            trip.record_ms(now - float(sent_ms))
            got.append(1)

    reader = threading.Thread(target=read_back, daemon=True)
    reader.start()
    producer = Producer(producer_config(bootstrap))
    try:
        assert far.stdout is not None
        if far.stdout.readline().strip() != "ready":
            raise RuntimeError("the far consumer never got its partitions")
        # warm-up until a record went there and back: both groups joined, metadata cached
        deadline = time.monotonic() + 60
        while not echoed.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("no warm-up record came back")
            for p in range(PARTITIONS):
                producer.produce(there, value=b"0 warm", partition=p)
            producer.flush(5)
            echoed.wait(1.0)
        t0 = time.perf_counter()
        for i in range(total):
            target = t0 + i / rate
            while (now := time.perf_counter()) < target:
                time.sleep(min(0.0005, target - now))
            producer.produce(
                there, value=b"%.3f %d" % (time.time() * 1000, i), key=b"%d" % (i % 64)
            )
            producer.poll(0)
        achieved = total / (time.perf_counter() - t0)
        producer.flush(30)
        out, _ = far.communicate(timeout=180)
        one_hop = json.loads(out.strip().splitlines()[-1])
        end = time.monotonic() + 30
        while len(got) < total // 2 and time.monotonic() < end:
            time.sleep(0.05)
    finally:
        stop.set()
        reader.join(5)
        home.close()
        if far.poll() is None:
            far.kill()
            far.wait(10)
        _delete_topics(bootstrap, [there, back])
    return {
        "offered_msg_per_s": rate,
        "achieved_msg_per_s": round(achieved),
        "one_hop_ms": {**one_hop, "of": total},
        "round_trip_ms": {**trip.summary_ms(), "of": total // 2},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import argparse

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--far"]:
        _far(args[1], args[2], args[3], int(args[4]))
        return {}
    if args[:1] == ["--sink"]:
        _sink(args[1], args[2], int(args[3]))
        return {}
    if args[:1] == ["--source"]:
        _source(args[1], args[2], int(args[3]), int(args[4]))
        return {}
    ap = argparse.ArgumentParser(prog="python -m bench.kafka_floor")
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--cpu", action="store_true", help="CPU per record, not the hops' latency")
    ns = ap.parse_args(args)
    with kafka("bench-floor") as bootstrap:
        run = cpu_per_message if ns.cpu else measure
        out = run(bootstrap, rate=ns.rate, seconds=ns.seconds)
    print(json.dumps(out, indent=2), flush=True)
    return out


if __name__ == "__main__":
    main()
