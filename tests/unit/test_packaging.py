"""The install is slim and reproducible (pyproject.toml, constraints.txt, LICENSE).

``pip install fleet-pipeline`` pulls the Kafka client, the envelope, the store, the CLI and MCP:
none of matplotlib, mypy, ruff or hypothesis, directly or through a dependency (the requirement
tree is walked in the installed packages' metadata; nothing is installed here). Every package
``make setup`` installs is pinned by the constraints file, inside pyproject's ranges."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
HEAVY = {"matplotlib", "mypy", "ruff", "hypothesis", "pytest", "testcontainers", "psycopg"}


def _core() -> list[Requirement]:
    return [Requirement(r) for r in PROJECT["dependencies"]]


def _tree(roots: list[Requirement]) -> set[str]:
    """Every distribution the ``roots`` need, by their installed metadata (markers evaluated
    here; a requirement whose marker holds but that is not installed is kept by name)."""
    seen: set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in roots]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(req.name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append((sub, frozenset(sub.extras)))
    return seen


def test_the_core_install_pulls_no_tool_of_the_lab_or_the_checks() -> None:
    direct = {canonicalize_name(r.name) for r in _core()}
    assert not direct & HEAVY, direct & HEAVY
    pulled = _tree(_core())
    assert {"confluent-kafka", "sqlalchemy", "typer", "mcp"} <= pulled
    assert not pulled & {"matplotlib", "mypy", "ruff", "hypothesis"}, sorted(pulled)


def test_the_extras_hold_what_the_core_leaves_out() -> None:
    extras = {
        name: {canonicalize_name(Requirement(r).name) for r in reqs}
        for name, reqs in PROJECT["optional-dependencies"].items()
    }
    assert {"lab", "postgres", "testing", "dev"} <= set(extras)
    assert "matplotlib" in extras["lab"] and "psycopg" in extras["postgres"]
    assert {"pytest", "testcontainers"} <= extras["testing"]
    assert {"mypy", "ruff", "hypothesis", "fleet-pipeline"} <= extras["dev"]


@pytest.mark.parametrize("name", ["typer", "mcp"])
def test_fast_moving_dependencies_have_a_floor_and_a_cap(name: str) -> None:
    req = next(r for r in _core() if canonicalize_name(r.name) == name)
    ops = {spec.operator for spec in req.specifier}
    assert ops == {">=", "<"}, req


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
            assert m, f"constraints.txt: not a pin: {line!r}"
            pins[canonicalize_name(m[1])] = m[2]
    return pins


def test_every_dependency_is_pinned_within_its_range() -> None:
    pins = _pins()
    assert "fleet-pipeline" not in pins  # the project itself is installed from the tree
    wanted = _core() + [Requirement(r) for r in PROJECT["optional-dependencies"]["dev"]]
    for req in wanted:
        name = canonicalize_name(req.name)
        if name == "fleet-pipeline":
            continue
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])


def test_the_license_file_is_the_one_the_metadata_names() -> None:
    assert PROJECT["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
