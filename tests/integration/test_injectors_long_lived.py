"""LongLivedCommandInjector against real child processes: frames, answers, deaths, timeouts."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.errors import InjectError
from pipeline.gateway.injectors import InjectUncertainError, LongLivedCommandInjector

ARGS = {"gid": "B-w1", "kind": "SEND", "sender": "A-main"}

# A child that records every brief it reads and acts on the body's first word.
CHILD = """
import json, os, sys, time
from pipeline.gateway.injectors.child import serve
log = open(sys.argv[1], "a")
def handle(brief):
    log.write(json.dumps({"pid": os.getpid(), "msgId": brief.msg_id, "from": brief.sender,
                          "to": brief.to, "kind": brief.kind, "body": brief.body.hex()}) + "\\n")
    log.flush()
    word = brief.body.split(b" ")[0]
    if word == b"busy":
        return "retry"
    if word == b"fail":
        raise RuntimeError("no such agent")
    if word == b"die":
        os._exit(9)
    if word == b"junk":
        sys.stdout.write("hello\\n"); sys.stdout.flush()
        time.sleep(30)
    if word == b"hang":
        time.sleep(30)
    return "ok"
serve(handle)
"""


@pytest.fixture
def seen(tmp_path: Path) -> Path:
    return tmp_path / "seen.jsonl"


@pytest.fixture
def injector(tmp_path: Path, seen: Path) -> Iterator[LongLivedCommandInjector]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    inj = LongLivedCommandInjector([sys.executable, str(script), str(seen)], timeout_s=5.0)
    yield inj
    inj.close()


def records(seen: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in seen.read_text().splitlines()]


def test_one_child_takes_brief_after_brief_with_its_envelope(
    injector: LongLivedCommandInjector, seen: Path
) -> None:
    bodies = [b"first", "zweite \u00fc\nline".encode(), bytes(range(256)) * 600]  # > a pipe
    for i, body in enumerate(bodies):
        injector.inject(msg_id=f"m-{i}", body=body, **ARGS)
    got = records(seen)
    assert [bytes.fromhex(r["body"]) for r in got] == bodies
    assert [(r["msgId"], r["from"], r["to"], r["kind"]) for r in got] == [
        (f"m-{i}", "A-main", "B-w1", "SEND") for i in range(3)
    ]
    assert len({r["pid"] for r in got}) == 1 and injector.starts == 1


def test_retry_answer_is_busy_and_retriable(injector: LongLivedCommandInjector) -> None:
    with pytest.raises(InjectError) as info:
        injector.inject(msg_id="m-1", body=b"busy now", **ARGS)
    assert (info.value.reason, info.value.retriable) == ("TARGET_BUSY", True)
    injector.inject(msg_id="m-2", body=b"ok now", **ARGS)  # the same child goes on
    assert injector.starts == 1


def test_error_answer_is_final_inject_failed_with_the_reason(
    injector: LongLivedCommandInjector,
) -> None:
    with pytest.raises(InjectError) as info:
        injector.inject(msg_id="m-1", body=b"fail", **ARGS)
    assert (info.value.reason, info.value.retriable) == ("INJECT_FAILED", False)
    assert "no such agent" in str(info.value)


def test_child_dying_mid_brief_is_uncertain_and_never_resent(
    injector: LongLivedCommandInjector, seen: Path
) -> None:
    """R-ACK-6, at-most-once: a brief the child held when it died is reported uncertain (it may
    have landed), not retried; the next brief goes to a new child."""
    injector.inject(msg_id="m-0", body=b"hello", **ARGS)
    with pytest.raises(InjectUncertainError) as info:
        injector.inject(msg_id="m-1", body=b"die", **ARGS)
    assert info.value.retriable is False and info.value.context["exit_code"] == 9
    injector.inject(msg_id="m-2", body=b"after", **ARGS)
    got = records(seen)
    assert [r["msgId"] for r in got] == ["m-0", "m-1", "m-2"]  # m-1 written exactly once
    assert got[0]["pid"] == got[1]["pid"] != got[2]["pid"] and injector.starts == 2


def test_a_child_that_breaks_the_protocol_is_uncertain_and_replaced(
    injector: LongLivedCommandInjector, seen: Path
) -> None:
    """R-ACK-6: junk instead of an answer leaves the brief's fate unknown: uncertain."""
    with pytest.raises(InjectUncertainError):
        injector.inject(msg_id="m-1", body=b"junk", **ARGS)
    injector.inject(msg_id="m-2", body=b"fine", **ARGS)
    assert injector.starts == 2 and [r["msgId"] for r in records(seen)] == ["m-1", "m-2"]


def test_no_answer_in_time_kills_the_child_inject_timeout(tmp_path: Path, seen: Path) -> None:
    """R-ACK-6: past timeout_s the brief is a final INJECT_TIMEOUT; the next one gets a child."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    inj = LongLivedCommandInjector([sys.executable, str(script), str(seen)], timeout_s=1.0)
    try:
        with pytest.raises(InjectError) as info:
            inj.inject(msg_id="m-1", body=b"hang", **ARGS)
        assert (info.value.reason, info.value.retriable) == ("INJECT_TIMEOUT", False)
        inj.inject(msg_id="m-2", body=b"fine", **ARGS)
        assert inj.starts == 2
    finally:
        inj.close()


def test_a_child_that_exits_between_briefs_is_restarted_before_the_next(
    tmp_path: Path,
) -> None:
    """A child gone before a brief was written cannot hold it: the brief goes to a new one."""
    inj = LongLivedCommandInjector(
        [
            sys.executable,
            "-c",
            "import sys; from pipeline.gateway.injectors.child import "
            "serve; serve(lambda b: sys.exit(0) if b.body == b'quit' else 'ok')",
        ]
    )
    try:
        inj.inject(msg_id="m-1", body=b"one", **ARGS)
        with pytest.raises(InjectUncertainError):  # exits holding the brief, no answer
            inj.inject(msg_id="m-2", body=b"quit", **ARGS)
        inj.inject(msg_id="m-3", body=b"two", **ARGS)
        assert inj.starts == 2
    finally:
        inj.close()


def test_a_child_that_never_reads_fails_the_brief_as_not_injected() -> None:
    """A frame the child could not have read whole was never injected: INJECT_FAILED."""
    inj = LongLivedCommandInjector(["sh", "-c", "exec 0<&-; sleep 5"], timeout_s=5.0)
    try:
        with pytest.raises(InjectError) as info:
            inj.inject(msg_id="m-1", body=b"x" * (1 << 20), **ARGS)
        assert info.value.reason == "INJECT_FAILED"
        assert not isinstance(info.value, InjectUncertainError)
    finally:
        inj.close()


def test_missing_executable_is_inject_failed() -> None:
    inj = LongLivedCommandInjector(["/nonexistent/fleet-child"])
    with pytest.raises(InjectError) as info:
        inj.inject(msg_id="m-1", body=b"x", **ARGS)
    assert info.value.reason == "INJECT_FAILED"


def test_close_ends_the_child(injector: LongLivedCommandInjector) -> None:
    injector.inject(msg_id="m-1", body=b"x", **ARGS)
    proc = injector._proc
    assert proc is not None
    injector.close()
    assert proc.returncode == 0  # it read the end of its input and exited by itself


def test_a_child_that_answers_out_of_turn_is_replaced_before_the_next_brief() -> None:
    """An extra answer line would be read as the next brief's: the child is replaced first."""
    chatty = (
        "import sys\n"
        "from pipeline.gateway.injectors.framing import answer, read_brief\n"
        "while (b := read_brief(sys.stdin.buffer)) is not None:\n"
        "    sys.stdout.buffer.write(answer(b.msg_id, 'ok') * 2)\n"
        "    sys.stdout.buffer.flush()\n"
    )
    inj = LongLivedCommandInjector([sys.executable, "-c", chatty])
    try:
        inj.inject(msg_id="m-1", body=b"one", **ARGS)
        inj.inject(msg_id="m-2", body=b"two", **ARGS)  # lands: a new child got it
        assert inj.starts == 2
    finally:
        inj.close()
