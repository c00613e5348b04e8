"""Helpers for the lag exporter's real-broker tests: a committing consumer thread, a steady
producer thread, a throwaway real Prometheus server, and the independent cross-check clients."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.kafka.local import resolve_classpath
from pipeline.kafka.local.ports import free_ports
from pipeline.kafka.settings import consumer_config, producer_config
from pipeline.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


class CommittingConsumer:
    """Consumes and commits after every batch (commit-after-processing, R-ACK-7)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self._conf = consumer_config(bootstrap, group)
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.consumed = 0

    def start(self) -> CommittingConsumer:
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = Consumer(self._conf)
        consumer.subscribe([self._topic])
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(num_messages=200, timeout=0.2)
                last: dict[tuple[str, int], int] = {}
                for m in msgs:
                    if m.error() is None:
                        last[(m.topic(), m.partition())] = m.offset()
                        self.consumed += 1
                if last:
                    consumer.commit(
                        offsets=[TopicPartition(t, p, o + 1) for (t, p), o in last.items()],
                        asynchronous=False,
                    )
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class SteadyProducer:
    """Produces ``rate`` records a second until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 20.0) -> None:
        self._producer = Producer(producer_config(bootstrap))
        self._topic = topic
        self._rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(self._topic, key=f"k{self.sent % 7}".encode(), value=b"x")
            self._producer.poll(0)
            self.sent += 1
            self._stop.wait(1.0 / self._rate)
        self._producer.flush(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class PrometheusServer:
    """A real Prometheus (Debian package) on a free loopback port, temp config and TSDB."""

    def __init__(self, *, scrape_target: str, rules: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="fleet-prom-"))
        self.port = free_ports(1)[0]
        (self.directory / "rules.yml").write_text(rules)
        (self.directory / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - rules.yml\n"
            "scrape_configs:\n  - job_name: fleet-exporter\n"
            f"    static_configs:\n      - targets: ['{scrape_target}']\n"
        )
        self._log = (self.directory / "prometheus.log").open("w")
        self._proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, timeout_s=60, what="prometheus ready", interval_s=0.3)

    def _ready(self) -> bool:
        if self._proc.poll() is not None:
            raise AssertionError((self.directory / "prometheus.log").read_text()[-2000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/{path}", timeout=5) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self, name: str, **labels: str) -> list[dict[str, Any]]:
        return [
            a
            for a in self.api("alerts")["alerts"]
            if a["labels"].get("alertname") == name
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=30)
        self._log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def shipped_rules_with_short_for(seconds: int) -> str:
    """deploy/prometheus/alerts.yml with every ``for:`` cut to ``seconds`` (test time scale)."""
    text = (REPO / "deploy" / "prometheus" / "alerts.yml").read_text()
    return re.sub(r"(?m)^(\s+for:)\s*\S+", rf"\1 {seconds}s", text)


def java_lag_probe(bootstrap: str, group: str) -> list[tuple[str, int, int, int, int, int]]:
    """The Java Admin client's view: (topic, partition, committed, log_start, log_end, lag)."""
    lib = resolve_classpath().lib_dir
    proc = subprocess.run(
        [
            "java",
            "-cp",
            f"{lib}/*",
            str(REPO / "tests" / "integration" / "java" / "LagProbe.java"),
            bootstrap,
            group,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    rows = []
    for line in proc.stdout.splitlines():
        t, *nums = line.split()
        p, c, s, e, lag = (int(n) for n in nums)
        rows.append((t, p, c, s, e, lag))
    return rows


def kcat_offsets(bootstrap: str, topic: str, partitions: int, which: int) -> dict[int, int]:
    """kcat -Q: ``which`` = -1 for the log end, -2 for the log start."""
    args = ["kcat", "-b", bootstrap, "-Q"]
    for p in range(partitions):
        args += ["-t", f"{topic}:{p}:{which}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    found = re.findall(r"\[(\d+)\] offset (-?\d+)", out)
    return {int(p): int(o) for p, o in found}


def kcat_read_one(bootstrap: str, topic: str, partition: int, offset: int) -> str:
    """Read one record's offset at ``offset`` with kcat (proves it still exists)."""
    return subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            str(partition),
            "-o",
            str(offset),
            "-c",
            "1",
            "-e",
            "-f",
            "%o\\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
