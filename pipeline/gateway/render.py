"""What an agent sees: receipts and control kinds decoded, as fields and as one sentence.

One rendering serves every reader -- ``fleet poll`` (text and ``--json``), the MCP ``poll`` tool,
and the injectors (what lands in a worker's pane). A control message's body is either an Avro
receipt (``INJECTED``, ``FAILED``) or empty (``NO_WAITER``, ``TOO_LATE``, ``ABANDONED``): neither
is readable as it stands, so :func:`describe` turns it into

* ``fields`` -- the structured view: ``about`` (the correlated msgId), ``turnId``, ``reason``,
  ``error``, ``stage``, ``recipient``, for programs;
* ``text`` -- one short sentence naming what happened, to which message or turn, and what the
  reader can do, for agents and people.

An ``INJECTED`` whose stage is ``stop`` or ``spawn`` is a control request's outcome, not an
injection: it reads "worker w-1 stopped (stop X)" (or spawned). One whose stage is ``uncertain``
is the inject journal's report after a crash mid-inject: it reads "may have been injected".

Content kinds (``SEND``, ``REPLY``, ``ASK``, ``ANSWER``, ``BROADCAST``) keep their body: the text
*is* the message. An ASK whose answer never came is reported to the asker as a ``FAILED`` about
the ASK with reason ``EXPIRED`` and stage ``expiry`` (``docs/gateway.md``, conversations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import read_receipt
from pipeline.errors import FleetError
from pipeline.host.held import HeldMessage
from pipeline.host.inject_journal import STAGE_UNCERTAIN

CONTROL_KINDS = frozenset(
    {Kind.INJECTED, Kind.FAILED, Kind.NO_WAITER, Kind.TOO_LATE, Kind.ABANDONED}
)
STAGE_EXPIRY = "expiry"
DONE = {"spawn": "spawned", "stop": "stopped"}  # an INJECTED's stage -> what was done


@dataclass(frozen=True, kw_only=True)
class Rendered:
    """A message as a reader sees it: its kind, a sentence, and the structured fields."""

    kind: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)


def describe(
    *, kind: str, sender: str, recipient: str, msg_id: str, turn_id: str | None, body: bytes
) -> Rendered:
    """Decode one message for a reader (never raises: an unreadable receipt says so)."""
    base: dict[str, Any] = {"turnId": turn_id} if turn_id else {}
    turn = f"turn {turn_id}" if turn_id else "a turn"
    if kind in (Kind.INJECTED, Kind.FAILED):
        try:
            r = read_receipt(kind, body)
        except FleetError as exc:
            return Rendered(
                kind=kind,
                text=f"{kind} from {sender}: unreadable receipt ({exc.reason})",
                fields=base | {"reason": exc.reason},
            )
        fields = base | {"about": r.msg_id, "recipient": r.recipient}
        if kind == Kind.INJECTED:
            if r.stage in DONE:  # a control request's outcome, not an injection
                return Rendered(
                    kind=kind,
                    text=f"worker {r.recipient} {DONE[r.stage]} ({r.stage} {r.msg_id}).",
                    fields=fields | {"stage": r.stage},
                )
            if r.stage == STAGE_UNCERTAIN:  # the inject journal's restart report
                return Rendered(
                    kind=kind,
                    text=f"uncertain: your message {r.msg_id} may have been injected into "
                    f"{r.recipient} (its gateway died mid-inject); check before sending it again.",
                    fields=fields | {"stage": r.stage},
                )
            return Rendered(
                kind=kind,
                text=f"delivered: your message {r.msg_id} was injected into {r.recipient}.",
                fields=fields,
            )
        fields |= {"reason": r.reason, "error": r.error, "stage": r.stage}
        if r.stage == STAGE_EXPIRY and turn_id:
            text = (
                f"expired: your question {r.msg_id} to {r.recipient} ({turn}) got no answer "
                "before it expired; the turn has ended."
            )
        elif r.stage in DONE:  # a control request refused or failed: say why (its reason)
            why = f"{r.reason}: {r.error}" if r.error else r.reason
            text = (
                f"FAILED: your {r.stage.upper()} {r.msg_id} of worker {r.recipient} failed ({why})."
            )
        else:
            why = f"{r.reason}: {r.error}" if r.error else r.reason
            text = f"FAILED: your message {r.msg_id} to {r.recipient} was not delivered ({why})."
        return Rendered(kind=kind, text=text, fields=fields)
    if kind == Kind.NO_WAITER:
        return Rendered(
            kind=kind,
            text=(
                f"NO_WAITER: nobody at {sender} was listening, so your question ({turn}) was "
                "not delivered; the turn has ended."
            ),
            fields=base | {"reason": Kind.NO_WAITER.value, "recipient": sender},
        )
    if kind == Kind.TOO_LATE:
        return Rendered(
            kind=kind,
            text=(
                f"TOO_LATE: your answer to {sender} ({turn}) came after that turn ended; "
                "it was not delivered."
            ),
            fields=base | {"reason": Kind.TOO_LATE.value, "recipient": sender},
        )
    if kind == Kind.ABANDONED:
        return Rendered(
            kind=kind,
            text=f"ABANDONED: {sender} gave up waiting ({turn}); an answer now gets TOO_LATE.",
            fields=base | {"reason": Kind.ABANDONED.value, "recipient": sender},
        )
    text = body.decode("utf-8", errors="replace")
    return Rendered(kind=kind, text=text, fields=base)


def held(message: HeldMessage) -> Rendered:
    return describe(
        kind=message.kind,
        sender=message.sender,
        recipient=message.recipient,
        msg_id=message.msg_id,
        turn_id=message.turn_id,
        body=message.body,
    )


def held_dict(message: HeldMessage) -> dict[str, Any]:
    """A held message for ``--json`` and MCP: envelope fields, the decoded fields, the sentence.

    ``body`` is the message text for content kinds and ``null`` for control kinds (their raw
    body is a receipt, decoded into the other fields).
    """
    r = held(message)
    out = message.as_dict()
    if message.kind in CONTROL_KINDS:
        out["body"] = None
    return out | r.fields | {"text": r.text}


def held_line(message: HeldMessage) -> str:
    """One line for text output: kind, msgId, sender, the sentence."""
    return f"{message.kind:<9} {message.msg_id} from {message.sender}: {held(message).text}"


def for_injector(envelope: Envelope, recipient: str) -> bytes:
    """The bytes an injector types: the sentence for a control kind, else the body as sent."""
    if envelope.kind not in CONTROL_KINDS:
        return envelope.body
    r = describe(
        kind=envelope.kind.value,
        sender=envelope.sender,
        recipient=recipient,
        msg_id=envelope.msg_id,
        turn_id=envelope.turn_id,
        body=envelope.body,
    )
    return f"[fleet] {r.text}".encode()


def nudge_text(gid: str, pending: int, oldest_age_s: float) -> str:
    """What a nudge types into a main's pane: how much waits, and what to do about it."""
    what = "1 message is" if pending == 1 else f"{pending} messages are"
    return (
        f"[fleet] {what} waiting for {gid} (oldest {oldest_age_s:.0f}s); "
        "call the fleet poll tool to read them."
    )
