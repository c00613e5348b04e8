"""Runs (R-OUT-1): a journal of steps per branch, exported through the outbox, and a tiny executor."""

from .executor import Executor, RunResult, counting_step
from .journal import RunJournal, StepRecord, branch_key_of, partition_key_of

__all__ = [
    "Executor",
    "RunJournal",
    "RunResult",
    "StepRecord",
    "branch_key_of",
    "counting_step",
    "partition_key_of",
]
