"""No module of ``pipeline/`` past the point where one concern fits (docs/README.md).

A module nearing the limit is split by concern in its own commit before more is added to it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "pipeline"
MAX_LINES = 500


def too_long(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    sizes = {
        str(p.relative_to(root.parent)): len(p.read_text().splitlines()) for p in root.rglob("*.py")
    }
    return {path: n for path, n in sorted(sizes.items()) if n > limit}


def test_no_module_is_over_the_limit() -> None:
    assert too_long(ROOT) == {}


def test_the_limit_is_checked(tmp_path: Path) -> None:
    pkg = tmp_path / "pipeline"
    pkg.mkdir()
    (pkg / "small.py").write_text("x = 1\n" * MAX_LINES)
    (pkg / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(pkg) == {"pipeline/big.py": MAX_LINES + 1}
