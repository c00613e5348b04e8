"""Local broker start time (median of N starts, 1 and 3 nodes) and one node's RSS.

Absolute seconds on a shared 2-core machine are noisy; the 3-node/1-node ratio is the figure
that travels. Run: ``python -m bench launcher`` (``--quick`` does 2 starts each).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline.kafka.local import LauncherConfig, LocalCluster


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _start_times(nodes: int, runs: int) -> tuple[list[float], float]:
    times: list[float] = []
    rss = float("nan")
    with tempfile.TemporaryDirectory(prefix="fleet-bench-launch-") as d:
        for _ in range(runs):
            t0 = time.monotonic()
            cluster = LocalCluster(LauncherConfig(directory=Path(d), nodes=nodes), owned=True)
            cluster.start()
            times.append(time.monotonic() - t0)
            if nodes == 1:
                time.sleep(2)
                pid = cluster.nodes[0].pid
                rss = _rss_mib(pid) if pid else rss
            cluster.stop()
    return times, rss


def main(quick: bool = False) -> dict[str, Any]:
    runs = 2 if quick else 5
    one, rss = _start_times(1, runs)
    three, _ = _start_times(3, runs)
    return {
        "runs": runs,
        "start_1_node_median_s": round(statistics.median(one), 2),
        "start_3_nodes_median_s": round(statistics.median(three), 2),
        "ratio_3_to_1": round(statistics.median(three) / statistics.median(one), 2),
        "one_node_rss_mib_after_ready": round(rss, 1),
        "samples_1": [round(t, 2) for t in one],
        "samples_3": [round(t, 2) for t in three],
    }
