"""The consumer runtime: one loop for both ack models (see ``docs/runtime.md``)."""

from pipeline.errors import FencedError, OffsetsLostError
from pipeline.record import Record

from .config import RuntimeConfig
from .loop import ConsumerRuntime
from .ports import DeadLetterSink, Handler, QuarantinePort, Verifies
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
    "Verifies",
]
