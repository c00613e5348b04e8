"""A run of some sections only (``BENCH_SECTIONS``) keeps the whole run's table: its result goes
beside it, named by the sections (``bench/__main__.py``). A knee run after the full bench once
replaced the full run's ``bench_hotpath.json``."""

from __future__ import annotations

from pathlib import Path

from bench.__main__ import result_path


def test_a_whole_run_and_a_run_of_some_sections_write_different_files(tmp_path: Path) -> None:
    whole = result_path(tmp_path, "bench_hotpath", None)
    assert whole == tmp_path / "bench_hotpath.json"
    assert result_path(tmp_path, "bench_hotpath", "") == whole
    knee = result_path(tmp_path, "bench_hotpath", "knee_sqlite")
    assert knee == tmp_path / "bench_hotpath.knee_sqlite.json"
    # the same sections in any order, repeated or with empty names: the same file
    assert result_path(tmp_path, "bench_hotpath", "floor,cpu_sqlite,,floor") == result_path(
        tmp_path, "bench_hotpath", "cpu_sqlite,floor"
    )
    assert len({whole, knee, result_path(tmp_path, "bench_hotpath", "floor")}) == 3
