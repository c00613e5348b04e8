"""The cyclic garbage collector's young generation, sized so a batch's objects die young.

CPython collects its youngest generation each time the tracked objects allocated, minus those
freed, pass a threshold (700 by default). A batch keeps its records, envelopes, staged rows and
follow-ups alive until it is through (a few dozen tracked objects per record, 500 records a
batch), so at the default threshold the collector ran every ~25 records of a backlog, found all
of them still alive, and promoted them into the older generations, whose full passes then walked
the whole heap again and again: ~13 µs of CPU per pulled record. Sized above a batch's worth,
the young generation is collected a few times per backlog instead, and what a batch built is
freed by reference counting before it is ever promoted. The heap is bounded the same way (only
objects in reference cycles wait for the collector, and they wait for at most this many
allocations).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # tracked objects: well above one full batch's (500 x a few dozen)


def size_for_batches() -> None:
    """Raise the young generation's threshold to :data:`YOUNG_THRESHOLD` (never lowers one set
    higher, and leaves a collector that was switched off by its threshold alone)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
