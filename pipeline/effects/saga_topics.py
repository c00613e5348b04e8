"""Topic names of the saga fabric: one command topic per participant, one reply and one event topic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SagaTopics:
    prefix: str = "fleet"

    def commands(self, participant: str) -> str:
        return f"{self.prefix}.saga.cmd.{participant}"

    @property
    def replies(self) -> str:
        return f"{self.prefix}.saga.reply"

    @property
    def events(self) -> str:
        return f"{self.prefix}.saga.events"
