"""The control plane's one answer path (SPAWN and STOP): ``INJECTED`` or ``FAILED`` for the
request's msgId, staged in the handler's transaction."""

from __future__ import annotations

from sqlalchemy.orm import Session

from pipeline.envelope import Envelope, Kind
from pipeline.envelope.receipts import failed_receipt, injected_body, injected_msg_id
from pipeline.host.outbound import Publisher

ANSWER_TTL_S = 3600.0


def stage_answer(
    publisher: Publisher,
    session: Session,
    *,
    request_msg_id: str,
    requester: str,
    requester_host: str,
    gid: str,
    trace_id: str,
    reason: str | None,
    error: str,
    stage: str = "spawn",
) -> None:
    """The one answer path of the control plane (SPAWN and STOP): ``INJECTED`` for the
    request's msgId on success, else ``FAILED`` with the reason; msgIds are derived from the
    request's, so a re-staged answer is the same message to the requester's dedupe."""
    if reason is None:
        answer = Envelope.new(
            kind=Kind.INJECTED,
            msg_id=injected_msg_id(request_msg_id),
            sender=publisher.gateway_id,
            to=requester,
            body=injected_body(request_msg_id, gid, stage=stage),
            ttl_s=ANSWER_TTL_S,
            trace_id=trace_id,
        )
    else:
        answer = failed_receipt(
            about=request_msg_id,
            recipient=gid,
            sender=publisher.gateway_id,
            to=requester,
            reason=reason,
            error=error,
            stage=stage,
            ttl_s=ANSWER_TTL_S,
            trace_id=trace_id,
        )
    publisher.stage(session, answer, to_host=requester_host)
