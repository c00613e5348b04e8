"""The consumer runtime: one loop for both ack models (see ``docs/runtime.md``)."""

from pipeline.failures.offsets import OffsetsLostError

from .loop import ConsumerRuntime, FencedError, RuntimeConfig
from .ports import DeadLetterSink, Handler, QuarantinePort
from .record import Record
from .staging import Staged

__all__ = [
    "ConsumerRuntime",
    "DeadLetterSink",
    "FencedError",
    "Handler",
    "OffsetsLostError",
    "QuarantinePort",
    "Record",
    "RuntimeConfig",
    "Staged",
]
