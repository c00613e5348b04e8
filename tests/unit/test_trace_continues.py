"""Answers and a worker's own sends continue their trace (docs/observability.md, "Answers
continue the trace"): FLEET_TRACE_ID from the injectors, --trace on the lean CLI path, trace_id
on the local socket."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pipeline.cli.lean import SPECS, TRACE_ENV
from pipeline.errors import ConfigError
from pipeline.gateway.injectors import framing
from pipeline.gateway.injectors.command import CommandInjector
from pipeline.gateway.socket_server import parse_send


def test_the_command_injector_hands_the_brief_trace_to_the_worker(tmp_path: Path) -> None:
    out = tmp_path / "env"
    injector = CommandInjector(["sh", "-c", f"echo $FLEET_TRACE_ID > {out}"], 10.0)
    injector.inject(gid="w", msg_id="m1", kind="SEND", sender="main", body=b"x", trace_id="t-1")
    assert out.read_text().strip() == "t-1"


def test_the_long_lived_frame_header_carries_the_trace() -> None:
    frame = framing.request(msg_id="m", sender="a", to="w", kind="SEND", body=b"hi", trace_id="t")
    header = json.loads(frame.split(b"\n", 1)[0])
    assert header["traceId"] == "t" and header["length"] == 2
    plain = framing.request(msg_id="m", sender="a", to="w", kind="SEND", body=b"hi")
    assert "traceId" not in json.loads(plain.split(b"\n", 1)[0])


@pytest.mark.parametrize("verb", ["send", "ask", "answer"])
def test_fleet_trace_defaults_to_fleet_trace_id(verb: str, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["-c", "f.toml", "--from", "w", "--to", "main", "body"]
    if verb == "answer":
        argv[4:4] = ["--turn", "T"]
    monkeypatch.delenv(TRACE_ENV, raising=False)
    assert SPECS[verb].parse(argv)["trace"] is None  # type: ignore[index]
    monkeypatch.setenv(TRACE_ENV, "brief-trace")
    assert SPECS[verb].parse(argv)["trace"] == "brief-trace"  # type: ignore[index]
    assert SPECS[verb].parse([*argv[:-1], "--trace", "given", "body"])["trace"] == "given"  # type: ignore[index]


def test_the_socket_takes_a_trace_id() -> None:
    body = base64.b64encode(b"x").decode()
    req = {"sender": "w", "to": "main", "body": body, "kind": "REPLY"}
    assert parse_send(req).trace_id is None
    assert parse_send(req | {"trace_id": "t"}).trace_id == "t"
    with pytest.raises(ConfigError):
        parse_send(req | {"trace_id": 7})
