"""``fleet quarantine ls | release`` on SQLite and PostgreSQL. Release is filed by the CLI and
executed by the partition's owner (here a thread playing the consumer loop)."""

from __future__ import annotations

import json
import threading
import time

from sqlalchemy.orm import Session
from typer.testing import CliRunner

from pipeline.cli.main import app
from pipeline.failures.quarantine import QuarantineStore, Scope
from pipeline.record import Record
from pipeline.store import make_engine

runner = CliRunner()
SCOPE = Scope("fleet.gw.h1", "fleet.inbox.h1")


def _rec(offset: int) -> Record:
    return Record(
        topic=SCOPE.topic,
        partition=1,
        offset=offset,
        timestamp_ms=5,
        key=b"K",
        headers=(("msgId", f"m{offset}".encode()),),
        value=b"v",
    )


def _seed(url: str) -> None:
    engine = make_engine(url)
    store = QuarantineStore(engine)
    with Session(engine) as s, s.begin():
        store.quarantine(
            s, SCOPE, "K", reason="RETRIES_EXHAUSTED", dead_letter_ref="d:0:4", record=_rec(4)
        )
        store.park(s, SCOPE, "K", _rec(6))
        store.quarantine(
            s, Scope("g2", SCOPE.topic), "K", reason="X", dead_letter_ref="d:0:5", record=_rec(5)
        )
    engine.dispose()


def test_ls_lists_scopes_keys_and_parked_counts(store_url: str) -> None:
    _seed(store_url)
    out = runner.invoke(app, ["quarantine", "ls", "--store-url", store_url, "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [(r["group"], r["key"], r["parked"], r["partition"]) for r in rows] == [
        ("fleet.gw.h1", "K", 1, 1),
        ("g2", "K", 0, 1),
    ]
    only = runner.invoke(
        app, ["quarantine", "ls", "--store-url", store_url, "--group", "g2", "--json"]
    )
    assert [r["group"] for r in json.loads(only.stdout)] == ["g2"]
    table = runner.invoke(app, ["quarantine", "ls", "--store-url", store_url])
    assert table.exit_code == 0 and "2 quarantined key(s)" in table.stdout


def test_release_files_a_request_and_waits_for_the_owner(store_url: str) -> None:
    _seed(store_url)
    ambiguous = runner.invoke(app, ["quarantine", "release", "K", "--store-url", store_url])
    assert ambiguous.exit_code == 1 and "AMBIGUOUS_SCOPE" in ambiguous.output
    unknown = runner.invoke(app, ["quarantine", "release", "nope", "--store-url", store_url])
    assert unknown.exit_code == 1 and "NOT_QUARANTINED" in unknown.output

    engine = make_engine(store_url)
    replayed: list[int] = []

    def owner() -> None:  # the consumer owning partition 1, polling for requests in its loop
        store = QuarantineStore(engine)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for req in store.pending_releases(SCOPE):
                assert req.partition == 1
                replayed.extend(p.record.offset for p in store.take_for_release(SCOPE, req.key))
                with Session(engine) as s, s.begin():
                    store.complete_release(s, SCOPE, req.key)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=owner)
    thread.start()
    try:
        out = runner.invoke(
            app,
            [
                "quarantine",
                "release",
                "K",
                "--store-url",
                store_url,
                "--group",
                SCOPE.group,
                "--topic",
                SCOPE.topic,
                "--timeout",
                "30",
                "--json",
            ],
        )
    finally:
        thread.join()
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["state"] == "DONE"
    assert replayed == [4, 6]  # the dead letter first, then the parked record
    left = QuarantineStore(engine).list()
    assert [e.scope.group for e in left] == ["g2"]

    # nobody owns g2's partition: --no-wait files and returns, a wait times out loudly
    filed = runner.invoke(
        app,
        [
            "quarantine",
            "release",
            "K",
            "--store-url",
            store_url,
            "--group",
            "g2",
            "--no-wait",
            "--json",
        ],
    )
    assert filed.exit_code == 0 and json.loads(filed.stdout)["state"] == "PENDING"
    waited = runner.invoke(
        app,
        [
            "quarantine",
            "release",
            "K",
            "--store-url",
            store_url,
            "--group",
            "g2",
            "--timeout",
            "0.5",
        ],
    )
    assert waited.exit_code == 75 and "RELEASE_TIMEOUT" in waited.output
    assert len(QuarantineStore(engine).pending_releases(Scope("g2", SCOPE.topic))) == 1
    engine.dispose()
