"""docs/requirements.md is the one thing rationale cites.

Every requirement id used anywhere in the repository is defined there; every test a requirement
names as its proof exists; and the code and docs cite nothing a reader cannot open (documents
kept outside the repository, an issue tracker, chaos catalogue numbers, work sessions).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "docs" / "requirements.md"

ID = re.compile(r"\bR-[A-Z]+-\d+\b")
DEFINITION = re.compile(r"^- \*\*(R-[A-Z]+-\d+)\*\*:", re.MULTILINE)
PROOF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")

# Citations of what a reader cannot open. Each pattern is written against the styles the
# repository used; "seed" alone is not one (random seeds and Ed25519 seeds are real things).
OUTSIDE_CITATIONS = {
    "a seed document": re.compile(
        r"\bseeds?[ _]?0\d\d\b|\bseeds?'s?(?=\W)|\bthe seeds?\b(?! of)|\bseed (rule|behaviou?r|scenario|formula)",
        re.IGNORECASE,
    ),
    "a section sign": re.compile(r"§\s?\d"),
    "the issue tracker": re.compile(r"(?<!librdkafka )\bissues? #?\d+\b", re.IGNORECASE),
    "a chaos catalogue number": re.compile(r"\b(chaos|catalogue)( scenario)? #\d+", re.IGNORECASE),
    "a work session": re.compile(r"\bsessions? \d+\b(?! ?(s|ms|seconds?)\b)", re.IGNORECASE),
    "the design map": re.compile(r"\bDESIGN(\.md)?\b"),
}


@cache
def defined_ids() -> frozenset[str]:
    ids = DEFINITION.findall(REQUIREMENTS.read_text(encoding="utf-8"))
    assert len(ids) == len(set(ids)), "an id is defined twice"
    return frozenset(ids)


def rules() -> dict[str, str]:
    """Each id with the text of its rule (up to the next rule or heading)."""
    text = REQUIREMENTS.read_text(encoding="utf-8")
    starts = list(DEFINITION.finditer(text))
    out = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        body = text[m.end() : end].split("\n## ", 1)[0]
        out[m.group(1)] = body
    return out


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in ("pipeline", "docs", "tests", "bench", "examples"):
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in {".py", ".md", ".toml"}]
    return sorted(p for p in files if p.is_file())


def test_every_cited_id_is_defined() -> None:
    unknown = []
    for path in scanned_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for rid in ID.findall(line):
                if rid not in defined_ids():
                    unknown.append(f"{path.relative_to(ROOT)}:{n}: {rid}")
    assert not unknown, "ids cited but not defined in docs/requirements.md:\n" + "\n".join(unknown)


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    }


def test_every_rule_is_proven_by_tests_that_exist() -> None:
    problems = []
    for rid, body in rules().items():
        if "Proven by:" not in body:
            problems.append(f"{rid}: no 'Proven by:'")
            continue
        proofs = PROOF.findall(body.split("Proven by:", 1)[1])
        if not proofs:
            problems.append(f"{rid}: 'Proven by:' names no test")
        for file, name in proofs:
            path = ROOT / file
            if not path.is_file():
                problems.append(f"{rid}: {file} does not exist")
            elif name not in _test_names(path):
                problems.append(f"{rid}: {file} has no test {name}")
    assert not problems, "\n".join(problems)


def outside_citations(text: str) -> list[tuple[int, str, str]]:
    """(line number, what is cited, the matched text) for each citation of the outside."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in OUTSIDE_CITATIONS.items():
            for m in pattern.finditer(line):
                found.append((n, what, m.group(0)))
    return found


def test_code_and_docs_cite_only_what_a_reader_can_open() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "pipeline").rglob("*.py")]
    problems = []
    for path in sorted(files):
        rel = path.relative_to(ROOT).as_posix()
        for n, what, match in outside_citations(path.read_text(encoding="utf-8")):
            problems.append(f"{rel}:{n}: cites {what} ({match!r})")
    assert not problems, (
        "cite a docs/requirements.md id or say the rationale instead:\n" + "\n".join(problems)
    )


def test_the_citation_patterns_catch_the_styles_they_are_for() -> None:
    cited = [
        "seed 000 §5",
        "Seed 001 scenario 3",
        "seed001-six",
        "the seed's lag example",
        "what the seeds forbid",
        "issue 17",
        "Issue 12 #18",
        "chaos #8",
        "catalogue #5",
        "session 8",
        "DESIGN.md §1",
    ]
    plain = [
        "random.Random(seed)",
        "an Ed25519 seed",
        "librdkafka issue #3437",
        "a 30 s session",
        "session 10 s",
        "R-ACK-3",
        "test_seed_001_numbers_are_refused",
    ]
    for text in cited:
        assert outside_citations(text), text
    for text in plain:
        assert not outside_citations(text), text
