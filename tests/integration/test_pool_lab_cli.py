"""``fleet pool submit`` and ``fleet lab predict`` as a user runs them: the CLI in a child
process (``python -m pipeline``), its output checked against what it must say.

R-POOL-1 (a pool topic fed by ``fleet pool submit``: one record per line, each with its own
msgId, keyed so that a key stays on one partition) and R-LAB-1 (the capacity model's numbers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from pipeline.kafka.topics import TopicNames
from pipeline.kafka.topology import ensure_pool_topic
from pipeline.support.processes import fleet_env
from pipeline.testing import BrokerHandle, unique_name
from tests.integration.dlq_helpers import read_all

WORKED_EXAMPLE = Path(__file__).parents[2] / "examples" / "lab" / "worked_example.toml"


def _fleet(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=fleet_env(),
        check=False,
    )


@pytest.mark.kafka
def test_pool_submit_cli_produces_one_keyed_record_per_line_with_its_msg_id(
    kafka: BrokerHandle, tmp_path: Path
) -> None:
    """R-POOL-1: ``fleet pool submit FILE`` produces every non-empty line (``key<TAB>body``; a
    line without a tab has no key), each with the fresh msgId it prints, in file order per key;
    ``--key`` from stdin keys every line alike."""
    pool = unique_name("pool").replace(".", "-")
    topic = TopicNames().pool(pool)
    ensure_pool_topic(kafka.bootstrap, TopicNames(), pool, partitions=4)
    lines = [f'k{i % 3}\t{{"n": {i}}}' for i in range(9)]
    text = "\n".join([*lines[:4], "", "no key here", *lines[4:]]) + "\n"
    (tmp_path / "events.txt").write_text(text, encoding="utf-8")

    out = _fleet(
        "pool", "submit", "--pool", pool, str(tmp_path / "events.txt"),
        "--bootstrap", kafka.bootstrap, "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["topic"] == topic
    ids = printed["msg_ids"]
    assert len(ids) == 10 and len(set(ids)) == 10, "one fresh msgId per non-empty line"

    plain = _fleet(
        "pool", "submit", "--pool", pool, "--bootstrap", kafka.bootstrap, "--key", "solo",
        stdin="first\tpart\nsecond\n",
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert f"submitted 2 record(s) to {topic}" in " ".join(plain.stdout.split())

    got = read_all(kafka.bootstrap, topic, 12)
    assert len(got) == 12
    by_id = {dict(m.headers())["msgId"].decode(): m for m in got}
    expected = [*lines[:4], "no key here", *lines[4:]]
    for msg_id, line in zip(ids, expected, strict=True):
        m = by_id[msg_id]
        key, _tab, body = line.rpartition("\t")
        assert (m.key(), m.value()) == ((key.encode() if key else None), body.encode())
    solo = [m for m in got if m.key() == b"solo"]
    assert sorted(m.value() for m in solo) == [b"first\tpart", b"second"], "--key keeps tabs"
    partitions: dict[bytes | None, set[int]] = defaultdict(set)
    order: dict[bytes | None, list[str]] = defaultdict(list)
    for m in sorted(got, key=lambda m: (m.partition(), m.offset())):
        partitions[m.key()].add(m.partition())
        order[m.key()].append(dict(m.headers())["msgId"].decode())
    for k in (b"k0", b"k1", b"k2", b"solo"):
        assert len(partitions[k]) == 1, f"key {k!r} spread over partitions"
    for k in (b"k0", b"k1", b"k2"):
        assert order[k] == [
            i for i, line in zip(ids, expected, strict=True) if line.startswith(k.decode() + "\t")
        ], "file order per key"


def test_lab_predict_cli_prints_the_worked_example_numbers() -> None:
    """R-LAB-1: the worked example (48 partitions, 4 members, 20/s, 2 s steps, every member down
    180 s) predicts 24/s capacity, 83% utilisation, a 3,600 backlog draining in 900 s and at most
    4 x 50 = 200 redelivered -- numbers worked by hand in the scenario file."""
    out = _fleet("lab", "predict", str(WORKED_EXAMPLE), "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["scenario"] == "seed001-worked-example"
    p = got["prediction"]
    assert p["counts"] == [12, 12, 12, 12] and p["idle_members"] == 0
    assert p["plan"]["m00"] == list(range(12)) and p["plan"]["m03"] == list(range(36, 48))
    assert p["capacity"] == 24.0 and p["in_flight"] == 40.0
    assert round(p["utilisation"], 3) == 0.833
    [outage] = p["outages"]
    assert (outage["backlog"], outage["drain_s"], outage["duplicates_bound"]) == (3600, 900, 200)
    assert p["batch_s"] == 100.0 and p["naive_loop_exceeds_poll_interval"] is False

    text = _fleet("lab", "predict", str(WORKED_EXAMPLE))
    assert text.returncode == 0, text.stderr
    lines = {line.split(maxsplit=1)[0]: line for line in text.stdout.splitlines() if line}
    assert "24.00 events/s" in lines["capacity"] and "83%" in lines["utilisation"]
    assert "backlog 3,600, drains in 900.0 s, redelivered <= 200" in lines["outage"]


def test_lab_predict_cli_counts_the_idle_members_when_members_outnumber_partitions(
    tmp_path: Path,
) -> None:
    """R-LAB-1: 5 members on 3 partitions -- two members idle, capacity is 3 lanes / 1 s = 3/s,
    and 2.4/s of arrivals is 80% utilisation; a bad scenario is refused with exit code 2."""
    scenario = tmp_path / "idle.toml"
    scenario.write_text(
        'name = "idle-members"\ndescription = "more members than partitions"\n'
        "partitions = 3\ntime_scale = 1.0\nduration_s = 60\n"
        '[members]\ncount = 5\nmax_poll_records = 10\nassignment = "range"\n'
        '[step]\nkind = "fixed"\nmean_s = 1.0\n'
        '[arrival]\nkind = "constant"\nrate = 2.4\n'
        "[keys]\ncount = 30\n",
        encoding="utf-8",
    )
    out = _fleet("lab", "predict", str(scenario), "--json")
    assert out.returncode == 0, out.stderr
    p = json.loads(out.stdout)["prediction"]
    assert sorted(p["counts"]) == [0, 0, 1, 1, 1] and p["idle_members"] == 2
    assert p["busy_lanes"] == 3 and p["capacity"] == 3.0
    assert round(p["utilisation"], 3) == 0.8 and p["outages"] == []

    bad = tmp_path / "bad.toml"
    bad.write_text(scenario.read_text().replace("partitions = 3", "partitions = 0"))
    refused = _fleet("lab", "predict", str(bad))
    assert refused.returncode == 1, (refused.stdout, refused.stderr)  # refused (docs/cli.md)
