"""What a release spent: one (epsilon, delta) type, summed by one function and checked
against the budget once, so that no stage adds its totals by hand."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from selpe_audit.artifact.records import LedgerEntry


@dataclass(frozen=True)
class Spent:
    """(epsilon, delta) as OpenDP's privacy maps give them; parts compose sequentially."""

    epsilon: float = 0.0
    delta: float = 0.0

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.epsilon + other.epsilon, self.delta + other.delta)


class MechanismStage(Protocol):
    """What every stage that runs a mechanism returns: its ledger entries and its spend."""

    @property
    def entries(self) -> list[LedgerEntry]: ...

    @property
    def spent(self) -> Spent: ...


def total_spent(stages: Iterable[MechanismStage]) -> Spent:
    """The release's spend: its stages' spends added in the order they ran."""
    total = Spent()
    for stage in stages:
        total = total + stage.spent
    return total


def ledger_entries(stages: Iterable[MechanismStage]) -> list[LedgerEntry]:
    """Every stage's ledger entries, in the order the stages ran."""
    return [e for stage in stages for e in stage.entries]


def check_within_budget(spent: Spent, epsilon: float, delta: float) -> None:
    """The one check of the release's accounting against its configured budget."""
    if spent.epsilon > epsilon + 1e-9 or spent.delta > delta * (1 + 1e-9):
        raise RuntimeError("OpenDP accounting exceeds the configured budget")
