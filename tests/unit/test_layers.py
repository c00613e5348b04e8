"""The dependency direction of `pipeline/`, held (docs/README.md, "How the house is laid out").

Every module of `pipeline/` belongs to one unit (a top-level module or a package); the units are
in one order, from the foundation to the entry points. A module imports only from its own unit
and from units earlier in the order. The imports are read from the source (AST), all of them:
`TYPE_CHECKING` blocks and imports inside functions count, because a cycle hidden from the
interpreter is still a cycle for the reader. Within a unit the module graph must be acyclic.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "pipeline"

#: Foundation first, entry points last: a unit may import only the units before it.
LAYERS: tuple[str, ...] = (
    "reasons",  # reason codes: the registry every error, metric and doc table derives from
    "errors",  # one error root with a `retriable` flag
    "record",  # the broker-neutral record a handler sees
    "record_headers",
    "schemas",  # Avro schemas of the bodies
    "hooks",
    "signals",
    "support",  # clock, waiting, retrying, /proc, strict config binding, child processes
    "tracing",  # the tracing seam: OpenTelemetry spans, off (and not imported) by default
    "kafka",  # the Kafka adapter: clients, settings, topics, the local broker
    "store",  # the SQL store: engine, schema, migrations
    "envelope",  # the signed envelope codec
    "capacity",  # seed formulas shared by the exporter and the lab
    "retention",  # the bounded purge; the rules are handed in by the composition root
    "runtime",  # the consumer runtime and its core types (outcomes, decisions, retry)
    "outbox",  # the transactional outbox and its relay
    "runs",  # step journal for executors
    "presence",  # signed heartbeats and the roster view
    "failures",  # dead letters, quarantine, the FAILED reporter
    "effects",  # idempotent effects and sagas
    "host",  # one host: its config, its store primitives, its local socket protocol
    "observability",  # the exporter and its readers
    "pool",  # worker pools
    "control",  # SPAWN / STOP: the control plane
    "gateway",  # the gateway process's parts
    "mcp",  # mains over MCP
    "bootstrap",  # the composition root: builds every process
    "testing",  # test doubles shipped for users
    "lab",  # the consumer-group scaling lab
    "chaos",  # the fault suite
    "demo",
    "cli",  # the `fleet` command
    "__main__",
)

#: The package itself (`pipeline/__init__.py`) is the public API: it may import anything.
PUBLIC_API = "pipeline"


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p): p for p in sorted(root.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Import]:
    """Every `pipeline` module `name` imports, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pipeline":
                    yield Import(name, _known(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pipeline":
                continue
            for alias in node.names:
                # `from pipeline import errors` imports the module pipeline.errors, not the package.
                sub = f"{target}.{alias.name}"
                yield Import(name, sub if sub in modules else _known(target, modules), node.lineno)


def _known(target: str, modules: dict[str, Path]) -> str:
    while target not in modules and "." in target:
        target = target.rpartition(".")[0]
    return target


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PUBLIC_API


def upward_imports(modules: dict[str, Path]) -> list[str]:
    rank = {unit: i for i, unit in enumerate(LAYERS)}
    found = []
    for name, path in modules.items():
        source = unit_of(name)
        if source == PUBLIC_API:
            continue
        for imp in imports_of(name, path, modules):
            target = unit_of(imp.target)
            if target == source:
                continue
            if target not in rank or source not in rank or rank[target] > rank[source]:
                found.append(f"{name}:{imp.line}: {source} -> {imp.target}")
    return found


def cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = {
        name: sorted({i.target for i in imports_of(name, path, modules) if i.target != name})
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start, targets in graph.items():
        if start in index:
            continue
        work = [(start, iter(targets))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_unit_is_in_the_layer_order() -> None:
    units = {unit_of(name) for name in all_modules()} - {PUBLIC_API}
    assert sorted(units - set(LAYERS)) == []
    assert sorted(set(LAYERS) - units) == []


def test_no_module_imports_a_later_layer() -> None:
    assert upward_imports(all_modules()) == []


def test_no_import_cycle() -> None:
    assert cycles(all_modules()) == []


# The checker is itself checked: a planted upward import and a planted cycle are both caught.


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    root = tmp_path / "pipeline"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(root.rglob("*.py"))
    }


@pytest.mark.parametrize(
    "statement",
    [
        "from pipeline.cli import main\n",
        "import pipeline.gateway.inbound\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pipeline import cli\n",
        "def later():\n    from ..gateway import inbound\n",
    ],
)
def test_a_planted_upward_import_is_caught(tmp_path: Path, statement: str) -> None:
    modules = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "kafka/__init__.py": "",
            "kafka/clients.py": statement,
            "cli/__init__.py": "",
            "cli/main.py": "",
            "gateway/__init__.py": "",
            "gateway/inbound.py": "from pipeline.kafka import clients\n",
        },
    )
    assert [line.split(": ")[1] for line in upward_imports(modules)] != []
    assert upward_imports({k: v for k, v in modules.items() if k != "pipeline.kafka.clients"}) == []


def test_a_planted_cycle_is_caught(tmp_path: Path) -> None:
    modules = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "control/__init__.py": "",
            "control/handler.py": "from .stop_handler import StopHandler\n",
            "control/stop_handler.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from .handler import Handler\n"
            ),
        },
    )
    assert cycles(modules) == [["pipeline.control.handler", "pipeline.control.stop_handler"]]
