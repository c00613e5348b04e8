"""Verify a batch of records across a small thread pool, results in the batch's order.

libsodium's Ed25519 verify (:mod:`.ed25519`) releases the GIL, so the signature checks of one batch run
in parallel on the free cores while the parsing around them takes turns. The calling thread
verifies one slice itself and ``threads - 1`` pool threads verify the others; the result list
lines up with the input: a :class:`~pipeline.envelope.verify.Verified`, or the exception that
``Verifier.verify`` raised for that record (an ``EnvelopeError`` with its reason). Nothing but
the CPU placement changes: every record runs the same stages in the same order (R-ENV-3).
A batch smaller than ``min_batch`` is verified inline (a thread hand-off would cost more than it
saves at low rates, where latency matters more than throughput).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from .headers import RawHeaders
from .reasons import H_MAC
from .verify import Verified, Verifier

Item = tuple[str, bytes | None, RawHeaders | None, bytes | None]  # topic, key, headers, value
Outcome = Verified | Exception


class BatchVerifier:
    """``verify_all(items)`` -> one :data:`Outcome` per item, in order (thread-safe per call)."""

    def __init__(self, verifier: Verifier, *, threads: int = 2, min_batch: int = 16) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.verifier = verifier
        self.threads = threads
        self.min_batch = max(min_batch, threads)
        self._pool = (
            ThreadPoolExecutor(threads - 1, thread_name_prefix="verify") if threads > 1 else None
        )

    def verify_all(self, items: Sequence[Item]) -> list[Outcome]:
        if self._pool is None or len(items) < self.min_batch:
            return self._slice(items)
        if not _signed_at_least(items, self.min_batch):
            # pairwise-MAC'd records: an HMAC holds the GIL for ~1 µs, so a second thread only
            # adds hand-offs around the parsing (measured: 2 threads at 0.79x one)
            return self._slice(items)
        size = -(-len(items) // self.threads)  # ceil: contiguous slices, the last one ours
        slices = [items[i : i + size] for i in range(0, len(items), size)]
        futures = [self._pool.submit(self._slice, s) for s in slices[:-1]]
        mine = self._slice(slices[-1])
        out: list[Outcome] = []
        for f in futures:
            out.extend(f.result())
        out.extend(mine)
        return out

    def _slice(self, items: Sequence[Item]) -> list[Outcome]:
        verify = self.verifier.verify
        out: list[Outcome] = []
        append = out.append
        for topic, key, headers, value in items:
            try:
                append(verify(topic=topic, key=key, headers=headers, value=value))
            except Exception as exc:  # noqa: BLE001 - handed back in place, raised by the caller
                append(exc)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _signed_at_least(items: Sequence[Item], n: int) -> bool:
    """Whether at least ``n`` items carry no pairwise tag (looks no further than it must: a
    signed batch is decided by its first ``n`` records)."""
    for item in items:
        if not _maced(item[2]):
            n -= 1
            if n <= 0:
                return True
    return False


def _maced(headers: RawHeaders | None) -> bool:
    """Whether the record carries the pairwise tag (the verifier decides if it is valid)."""
    return bool(headers) and any(name == H_MAC for name, _ in headers or ())
