"""Every publish from a gateway goes through the outbox, in the caller's transaction.

``Publisher.stage`` signs (or, in the pairwise mode, MACs) the envelope for its destination
topic and writes the exact record (key = recipient gid, signed headers, body) as an outbox row;
the relay ships it verbatim. The
branch key is ``<host>><to>`` so messages from one host to one recipient keep their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from pipeline import outbox
from pipeline.envelope import Envelope, Signer, encode
from pipeline.envelope.pairwise import MAC_KINDS, Pairing
from pipeline.kafka.topics import TopicNames
from pipeline.outbox.writer import write_branch
from pipeline.record import Headers
from pipeline.tracing import TRACING

GATEWAY_SUFFIX = "._gateway"


@dataclass(frozen=True, kw_only=True)
class Publisher:
    host: str
    signer: Signer
    topics: TopicNames
    # the pairwise MAC mode (docs/envelope.md): a conversation record for a host that published
    # an agreement key in its signed presence is MAC'd for that host; None: everything signed
    pairing: Pairing | None = None
    # each host's inbox topic, named (and its host id checked) once, not per send
    _inboxes: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def gateway_id(self) -> str:
        """The ``from`` of messages the gateway itself originates (INJECTED, NO_WAITER...)."""
        return f"{self.host}{GATEWAY_SUFFIX}"

    def stage(self, session: Session | Connection, envelope: Envelope, *, to_host: str) -> int:
        """Sign (or MAC) ``envelope`` for ``to_host``'s inbox and write it as an outbox row in
        ``session``'s transaction (a ``Connection``: see :func:`pipeline.outbox.write`)."""
        topic, branch_key, (key, value, headers) = self._encoded(envelope, to_host)
        return outbox.write(
            session, topic=topic, key=key, value=value, headers=headers, branch_key=branch_key
        )

    def stage_many(
        self,
        session: Session | Connection,
        staged: Sequence[tuple[Envelope, str]],
        *,
        commit: bool = False,
        before: Sequence[tuple[str, Sequence[Sequence[Any]]]] = (),
    ) -> None:
        """:meth:`stage` for each ``(envelope, to_host)``, in order: the envelopes of one branch
        (one recipient on one host) are written together
        (:func:`pipeline.outbox.writer.write_branch`), each branch's rows in their order.
        ``commit``: the caller commits right after (the last branch's rows may carry the
        ``COMMIT``, ``write_branch``). ``before``: writes of the transaction nobody reads back,
        run ahead of the first branch's rows (on PostgreSQL in their round trip)."""
        branches: dict[tuple[str, str], list[tuple[bytes | None, bytes | None, Headers]]] = {}
        for envelope, to_host in staged:
            topic, branch_key, record = self._encoded(envelope, to_host)
            branches.setdefault((topic, branch_key), []).append(record)
        last = len(branches) - 1
        if not branches and before:
            write_branch(session, [], topic="", branch_key="", before=before)  # runs them
        for n, ((topic, branch_key), records) in enumerate(branches.items()):
            write_branch(
                session, records, topic=topic, branch_key=branch_key,
                commit=commit and n == last, before=before if n == 0 else (),
            )  # fmt: skip

    def _encoded(
        self, envelope: Envelope, to_host: str
    ) -> tuple[str, str, tuple[bytes, bytes, Headers]]:
        """``envelope`` signed (or MAC'd) for ``to_host``'s inbox: its topic, its branch key and
        its record (key, value, headers)."""
        topic = self._inboxes.get(to_host)
        if topic is None:
            topic = self._inboxes[to_host] = self.topics.inbox(to_host)
        pair = None
        if self.pairing is not None and envelope.kind in MAC_KINDS:
            pair = self.pairing.seal(to_host)
        key, headers, value = encode(envelope, topic=topic, signer=self.signer, pair=pair)
        if TRACING.on:  # fleet.send / fleet.outbox.commit; the row keeps the traceparent
            headers = TRACING.staged(envelope, topic, headers)
        return topic, f"{self.host}>{envelope.to}@{to_host}", (key, value, headers)
