"""The pull path alone: Ed25519-signed vs pairwise-MAC'd records, in one run.

The signed pull rows of ``bench_runtime`` without the unsigned contenders: N signed and N MAC'd
1 KiB REPLYs to 24 pull mains through the gateway's ``InboxHandler`` in the runtime, verification
on the consume thread and on 2 threads; msg/s, CPU µs per message, 2-thread speed-up and the
MAC/signed ratio, three repeats as min / median / max. ``python -m bench pull`` (``--quick``:
4k records, 1 repeat). Target: ≥ 10k msg/s on 2 cores.
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

from bench.bench_runtime import PULL_ROWS, _signed, _spread
from bench.broker import kafka

FULL = (20_000, 3)  # records per mode, repeats


def main(quick: bool) -> dict[str, Any]:
    n, repeats = (4_000, 1) if quick else FULL
    runs: list[dict[str, float]] = []
    with kafka("bench") as bootstrap, tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            runs.append(_signed(bootstrap, n, tmp, r))
            print(json.dumps(runs[-1]), flush=True)
    return {
        "records": n,
        "runs": runs,
        **{k: _spread([run[k] for run in runs]) for k in PULL_ROWS},
        "targets": {"mac_pull_2threads_msg_per_s": 10_000},
    }
