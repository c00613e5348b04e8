"""Saga definitions, states and the messages between orchestrator and participants (R-SAGA-1).

A definition is an ordered list of steps; each names the participant that runs its action and its
compensation, or is an **approval** that waits for a decision until a deadline. A failure at step
k runs compensations k-1 ... 1 in reverse; a compensation retried ``max_compensation_attempts``
times without success moves the saga to the **human queue** with its full state; between
attempts it waits an exponential backoff (``compensation_backoff_s``, doubled, capped).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import ConfigError
from pipeline.reasons import Saga
from pipeline.support.retrying import Backoff

from .keys import key_from_identity


class SagaState(enum.StrEnum):
    RUNNING = "running"  # pending: forward steps under way
    AWAITING_APPROVAL = "awaiting_approval"  # pending: an approval step waits for a decision
    COMPENSATING = "compensating"  # pending: undoing steps in reverse
    COMPLETED = "completed"
    ABORTED = "aborted"  # every completed step was compensated, once
    HUMAN = "human"  # a compensation kept failing: a person decides (fleet saga resolve|retry)

    @property
    def pending(self) -> bool:
        """Intermediate state: readers must treat what the saga holds as provisional."""
        return self in (SagaState.RUNNING, SagaState.AWAITING_APPROVAL, SagaState.COMPENSATING)


class Phase(enum.StrEnum):
    ACTION = "action"
    COMPENSATE = "compensate"


@dataclass(frozen=True, kw_only=True)
class SagaStep:
    """One step: ``participant`` runs ``name`` and, to undo it, ``compensate``; or an approval."""

    name: str
    participant: str | None = None
    approval: bool = False
    deadline_s: float = 3600.0  # approvals only


@dataclass(frozen=True, kw_only=True)
class SagaDefinition:
    name: str
    steps: tuple[SagaStep, ...]
    max_compensation_attempts: int = 5
    # a failed compensation is sent again after base * 2**(n-1) s (n = failures so far), capped:
    # a participant that is down or overloaded is not hammered; 0 = at once
    compensation_backoff_s: float = 1.0
    compensation_backoff_max_s: float = 60.0

    def compensation_delay_s(self, failures: int) -> float:
        """How long to wait before the next attempt after ``failures`` (>= 1) failed attempts."""
        return Backoff(
            initial_s=self.compensation_backoff_s, max_s=self.compensation_backoff_max_s
        ).delay(failures)

    def __post_init__(self) -> None:
        problems = []
        if not self.steps:
            problems.append("no steps")
        for s in self.steps:
            if s.approval == (s.participant is not None):
                problems.append(f"step {s.name!r} needs exactly one of participant or approval")
        if len({s.name for s in self.steps}) != len(self.steps):
            problems.append("step names must be unique")
        if self.max_compensation_attempts < 1:
            problems.append("max_compensation_attempts must be >= 1")
        if self.compensation_backoff_s < 0 or self.compensation_backoff_max_s < 0:
            problems.append("compensation backoff must be >= 0")
        if problems:
            raise ConfigError(
                f"saga {self.name!r}: {'; '.join(problems)}",
                reason=Saga.SAGA_DEFINITION_INVALID,
            )


def step_key(saga_id: str, step: int, phase: Phase) -> str:
    """Each step and each compensation has its own idempotency key, from the saga's identity."""
    return key_from_identity("saga", saga_id, step, phase.value)


@dataclass(frozen=True, kw_only=True)
class Command:
    """Orchestrator -> participant: run (or compensate) ``step`` of ``saga_id``."""

    saga_id: str
    step: int
    name: str
    phase: Phase
    attempt: int
    key: str
    payload: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps({**self.__dict__, "phase": self.phase.value}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Command:
        d = json.loads(raw)
        return cls(**{**d, "phase": Phase(d["phase"])})


@dataclass(frozen=True, kw_only=True)
class Reply:
    """Participant -> orchestrator: how the command went (a stored result on a redelivery)."""

    saga_id: str
    step: int
    phase: Phase
    attempt: int
    ok: bool
    result: Any = None
    error: str = ""

    def encode(self) -> bytes:
        return json.dumps({**self.__dict__, "phase": self.phase.value}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Reply:
        d = json.loads(raw)
        return cls(**{**d, "phase": Phase(d["phase"])})
