"""Run every ``bench/bench_*.py`` (or those named): ``python -m bench [name ...] [--quick]``.

``python -m bench profile [...]`` is the py-spy profile of both gateways (:mod:`bench.profile`,
its own options), never part of a run of every bench.

Each module exposes ``main(quick: bool) -> dict``; results are printed and written as JSON to
``bench/results/<name>.json``. Machines here are shared and noisy: read ratios, not absolutes.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
from pathlib import Path


def main() -> None:
    if sys.argv[1:2] == ["profile"]:
        from .profile import main as profile

        profile(sys.argv[2:])
        return
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    quick = "--quick" in sys.argv
    here = Path(__file__).parent
    known = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__.strip().splitlines()[0])
        print("benchmarks:", " ".join(n.removeprefix("bench_") for n in known))
        print("profile: python -m bench profile --help")
        return
    names = args or known
    out = here / "results"
    out.mkdir(exist_ok=True)
    for name in names:
        module = importlib.import_module(
            f"bench.{name if name.startswith('bench_') else 'bench_' + name}"
        )
        print(f"== {module.__name__}", flush=True)
        result = module.main(quick)
        print(json.dumps(result, indent=2), flush=True)
        path = result_path(out, module.__name__.split(".")[-1], os.environ.get("BENCH_SECTIONS"))
        path.write_text(json.dumps(result, indent=2))


def result_path(out: Path, name: str, sections: str | None) -> Path:
    """Where a run's result goes: ``<name>.json``; a run of some sections only
    (``BENCH_SECTIONS``) beside it, named by them, so it never replaces a whole run's table."""
    only = sorted({n for n in (sections or "").split(",") if n})
    return out / (f"{name}.{'+'.join(only)}.json" if only else f"{name}.json")


if __name__ == "__main__":
    main()
