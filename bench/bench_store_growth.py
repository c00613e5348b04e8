"""Store growth at a steady rate, before vs after the retention horizon passes.

Two in-process gateways (A sends to ``main-b`` on B, which drains it) at a steady rate, with a
short ``[retention]`` (finished rows kept 5 s, dedupe rows 8 s = the inbox topic's 6 s + a 2 s
replay window, a purge pass every second). ``fleet store stats`` is read from both stores every
2 s. The figure is ``growth_ratio``: the growth rate (a least-squares slope, so the sawtooth of one
purge pass a second does not count) in the second half of the run over the first half, for the
rows of the bounded tables and for the bytes the databases use (SQLite: pages minus the free
pages a purge left for reuse). Before the horizon the store grows; after it
the purger deletes as fast as traffic writes, so the second half is flat: the ratio is ~0 (a
store without retention would show ~1).

Run: ``python -m bench store_growth`` (``--quick`` halves the run). Needs ``KAFKA_BOOTSTRAP`` or
starts a local broker. Bounded: 90 s of traffic (40 s quick) plus start-up.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.broker import kafka
from pipeline.bootstrap.gateway import GatewayParts, build_gateway
from pipeline.bootstrap.retention import RULES
from pipeline.envelope import Signer, TrustStore
from pipeline.host.entity_config import EntityConfig
from pipeline.host.gateway_config import GatewayConfig
from pipeline.presence.model import Delivery, Role
from pipeline.retention import RetentionConfig
from pipeline.retention.rules import StoreTable
from pipeline.retention.stats import StoreStats, store_stats
from pipeline.support.waiting import wait_until
from pipeline.testing import unique_name

RATE = 25  # messages per second
SAMPLE_S = 2.0
POLICY = RetentionConfig(
    outbox_sent_s=5,
    tracking_finished_s=5,
    held_drained_s=5,
    turns_closed_s=5,
    inbox_topic_s=6,
    replay_window_s=2,
    dedupe_s=8,
    every_s=1,
)
BOUNDED = {t.value for t in StoreTable}


def _gateways(bootstrap: str, root: Path) -> tuple[GatewayParts, GatewayParts]:
    prefix = unique_name("grow").replace(".", "") + "."
    trust = TrustStore()
    signers = {h: Signer.generate(h) for h in ("A", "B")}
    for s in signers.values():
        trust.add(s.host, s.key_id, s.public_key_bytes)

    def build(host: str, gid: str) -> GatewayParts:
        cfg = GatewayConfig(
            host=host,
            bootstrap=bootstrap,
            store_url=f"sqlite:///{root / (host + '.sqlite')}",
            topic_prefix=prefix,
            presence_interval_s=1.0,
            presence_ttl_s=60.0,
            entities=(EntityConfig(gid=gid, role=Role.MAIN, delivery=Delivery.PULL),),
            retention=POLICY,
        )
        return build_gateway(cfg, signer=signers[host], trust=trust)

    return build("A", "main-a"), build("B", "main-b")


def _size(stats: list[StoreStats]) -> tuple[int, int]:
    rows = sum(t.rows for s in stats for t in s.tables if t.table in BOUNDED)
    return rows, sum(s.used_bytes for s in stats)


def _slope(points: list[tuple[float, int, int]], col: int) -> float:
    """Least-squares growth per second: robust to the sawtooth of one purge pass a second."""
    n = len(points)
    mt = sum(p[0] for p in points) / n
    mv = sum(p[col] for p in points) / n
    var = sum((p[0] - mt) ** 2 for p in points)
    return sum((p[0] - mt) * (p[col] - mv) for p in points) / var if var else 0.0


def _ratio(series: list[tuple[float, int, int]], col: int) -> float | None:
    """Growth rate in the second half over the first half (~0: flat once the horizon passed)."""
    mid = len(series) // 2
    first, second = _slope(series[: mid + 1], col), _slope(series[mid:], col)
    return None if first <= 0 else round(second / first, 3)


def main(quick: bool) -> dict[str, Any]:
    seconds = 40.0 if quick else 90.0
    with kafka("bench") as bootstrap, tempfile.TemporaryDirectory() as d:
        a, b = _gateways(bootstrap, Path(d))
        a.gateway.start()
        b.gateway.start()
        try:
            wait_until(lambda: a.client.knows("main-b"), timeout_s=60, what="B's presence at A")
            series = _traffic(a, b, seconds)
        finally:
            a.gateway.stop()
            b.gateway.stop()
    return {
        "rate_msg_per_s": RATE,
        "seconds": seconds,
        "horizon_s": POLICY.dedupe_s + POLICY.every_s,
        "rows_start_mid_end": [series[0][1], series[len(series) // 2][1], series[-1][1]],
        "used_bytes_start_mid_end": [series[0][2], series[len(series) // 2][2], series[-1][2]],
        "rows_peak": max(r for _, r, _ in series),
        "rows_second_half_min_max": [
            min(r for _, r, _ in series[len(series) // 2 :]),
            max(r for _, r, _ in series[len(series) // 2 :]),
        ],
        "rows_per_s_first_half": round(_slope(series[: len(series) // 2 + 1], 1), 2),
        "rows_per_s_second_half": round(_slope(series[len(series) // 2 :], 1), 2),
        "growth_ratio_rows": _ratio(series, 1),
        "growth_ratio_bytes": _ratio(series, 2),
    }


def _traffic(a: GatewayParts, b: GatewayParts, seconds: float) -> list[tuple[float, int, int]]:
    """Send at RATE for ``seconds`` while B drains; (t, rows, used bytes) every SAMPLE_S."""
    series: list[tuple[float, int, int]] = []
    start = time.monotonic()
    next_sample = start
    sent = 0
    while True:
        now = time.monotonic()
        if now >= next_sample:
            series.append(
                (now - start, *_size([store_stats(a.engine, RULES), store_stats(b.engine, RULES)]))
            )
            next_sample += SAMPLE_S
            if now - start >= seconds:
                return series
        due = int((now - start) * RATE)
        while sent < due:
            a.client.send(sender="main-a", to="main-b", body=b"x" * 256)
            sent += 1
        b.client.poll("main-b", limit=100)
        time.sleep(0.01)
