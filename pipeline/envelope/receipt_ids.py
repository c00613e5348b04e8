"""The msgIds of the gateway's answers about another message: one spelling each.

An answer's msgId is derived from the msgId it is about, never minted, so every source of the
same answer writes the same message. For ``FAILED`` that is what makes "exactly one FAILED per
send" (R-ACK-5, R-DLQ-4) hold across sources: the sender's deadline tracker, the DLQ reporter, the
relay's terminal sink, a failed inject and the control plane's answer all use
:func:`failed_msg_id`, so the sender's dedupe, its tracking row and its unique held row keep the
first and drop the rest; and a re-emit after a crash is the same message to the receiver.

Here, at the envelope layer, because the DLQ reporter (``pipeline.failures``) records the id in
its dedupe row and sits below the host package that builds the envelope.
"""

from __future__ import annotations


def failed_msg_id(original_msg_id: str) -> str:
    """The msgId of every ``FAILED`` about ``original_msg_id``, whichever source sends it."""
    return f"failed-{original_msg_id}"


def injected_msg_id(request_msg_id: str) -> str:
    """The msgId of the control plane's ``INJECTED`` answer to a SPAWN or STOP request."""
    return f"injected-{request_msg_id}"


def expired_msg_id(ask_msg_id: str) -> str:
    """The msgId of the turn-expiry notice about an unanswered ASK: a ``FAILED`` in kind, but
    its own message, not ``failed-<ask>``: what failed is the answer that never came, not the
    ASK's delivery."""
    return f"expired-{ask_msg_id}"
