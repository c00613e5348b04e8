"""What can be checked before a row is written: the Kafka record's size against the limit.

A record above the topic's ``max.message.bytes`` can never be published; letting it into the
outbox would only stop its branch at the relay. :func:`check_record_size` refuses it in the
writer's transaction with ``TOO_LARGE``, naming the size and the limit. The default limit is
1 MiB: the broker's and our topics' ``max.message.bytes`` (1 MiB plus batch framing), below which
every record this check admits fits.
"""

from __future__ import annotations

from pipeline.errors import DeliveryError
from pipeline.reasons import Outbox
from pipeline.record import Headers

from .headers import fold_headers

DEFAULT_MAX_RECORD_BYTES = 1024 * 1024
# Record framing inside a v2 batch (length, attributes, deltas, varints) plus the batch header:
# an upper bound, so a record the check admits is never rejected for a few bytes.
_RECORD_OVERHEAD = 128


def record_size(
    *,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    tenant: str,
    branch_key: str,
    lsn: int,
) -> int:
    """Bytes the record takes on the wire, with the fold headers the relay appends."""
    all_headers = list(headers or []) + fold_headers(tenant, branch_key, lsn)
    head = sum(len(k.encode()) + len(v) + 10 for k, v in all_headers)
    return len(key or b"") + len(value or b"") + head + _RECORD_OVERHEAD


def packed_record_size(
    *,
    key: bytes | None,
    value: bytes | None,
    packed: bytes,
    count: int,
    tenant: str,
    branch_key: str,
    lsn: int,
) -> int:
    """:func:`record_size` from the headers' stored form (:func:`~pipeline.record_headers.
    pack_headers`: 6 bytes of lengths per header where the wire estimate counts 10) and their
    ``count``: the writer packs them anyway, so they are not walked again."""
    fold = sum(len(k.encode()) + len(v) + 10 for k, v in fold_headers(tenant, branch_key, lsn))
    return len(key or b"") + len(value or b"") + len(packed) + 4 * count + fold + _RECORD_OVERHEAD


def check_record_size(size: int, limit: int, *, topic: str) -> None:
    if size > limit:
        raise DeliveryError(
            f"record of {size} bytes for {topic} is above the limit of {limit} bytes "
            f"(the topic's max.message.bytes); nothing was written",
            reason=Outbox.TOO_LARGE,
            retriable=False,
            context={"size": size, "limit": limit, "topic": topic},
        )
