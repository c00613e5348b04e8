"""The long-lived injector's frames (docs/injectors.md): a request header and an ``ok`` answer
written without the JSON encoder are the bytes the encoder writes, for every id and gid --
plain ones take the short way, any other (quotes, backslashes, control or non-ASCII
characters) the encoder itself (R-ACK-6: a brief is written once, whole, as the child reads it)."""

from __future__ import annotations

import io
import json

import pytest

from pipeline.gateway.injectors import framing

IDS = ["0f1e2d3c4b5a69788796a5b4c3d2e1f0", "a-b_c.d:e/f g", 'q"uote', "back\\slash", "tab\there",
       "naïve", "emoji-\U0001f600", "~!#$%&'()*+,-./[]^_`{|}"]  # fmt: skip


def _encoded(msg_id: str, sender: str, to: str, kind: str, trace_id: str, body: bytes) -> bytes:
    header: dict[str, object] = {"msgId": msg_id, "from": sender, "to": to, "kind": kind}
    if trace_id:
        header["traceId"] = trace_id
    header["length"] = len(body)
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


@pytest.mark.parametrize("text", IDS)
@pytest.mark.parametrize("trace_id", ["", "7d3c"])
def test_a_request_frame_is_the_json_encoders_bytes_and_reads_back(
    text: str, trace_id: str
) -> None:
    body = b"\x00any bytes\n{}"
    for args in ((text, "main-a", "worker-b"), ("m1", text, "worker-b"), ("m1", "main-a", text)):
        frame = framing.request(
            msg_id=args[0], sender=args[1], to=args[2], kind="SEND", body=body, trace_id=trace_id
        )
        assert frame == _encoded(*args, "SEND", trace_id, body)
        brief = framing.read_brief(io.BytesIO(frame))
        assert brief == framing.Brief(args[0], args[1], args[2], "SEND", body)


@pytest.mark.parametrize("msg_id", IDS)
def test_the_ok_line_is_the_answer_the_child_writes(msg_id: str) -> None:
    assert framing.ok_line(msg_id) == framing.answer(msg_id, framing.OK)
    assert framing.parse_answer(framing.ok_line(msg_id)) == framing.Answer(msg_id, framing.OK)
