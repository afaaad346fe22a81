"""The counts modes: one protocol, one registry.

A counts mode is its public `CountsModeDescriptor` (name, accounting, words; kept in the
shared core so the config check and the review know it without this package) plus what
only the enclave runs: `measure`, which plans its count queries from the ``[counts]``
settings and its budget, runs them through OpenDP, and returns the ledger entries and the
artifact's ``counts`` block. `register` puts both in place, so a new mode is one module
that calls it: the CLI's choices, the config check, the pipeline, the mechanism audit's
choices and the benchmarks read the registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import polars as pl

from release.config_sections import CountsConfig
from release.counts.workload import Workload
from release.dp.unit import PrivacyUnit
from selpe_audit.artifact.counts_modes import (
    COUNTS_MODES,
    CountsModeDescriptor,
    counts_modes,
    register_counts_mode,
)
from selpe_audit.artifact.model_block import Topics
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.registry import Registry
from selpe_audit.schema import Schema

#: Entry-point group of counts modes in other packages: each names a module that calls
#: `register` when imported (``[project.entry-points."selpe_audit.counts_modes"]``).
PLUGIN_GROUP = "selpe_audit.counts_modes"


@dataclass(frozen=True)
class CountsBudget:
    """What the counts may spend: (epsilon, delta); delta is 0 for a pure-DP mode."""

    epsilon: float
    delta: float = 0.0


@dataclass(frozen=True)
class CountsRows:
    """The private rows as every counts mode reads them: one row each of public-key codes
    (class, fields' categories or bins, cohort, outcomes, topics) and the unit code
    (`release.counts.keys.derive_frame`), the privacy unit, and the free-text topic columns
    a model mode adds (``topics``: topics per text field, ``slots``: columns per field,
    ``topic_blocks``: the artifact's ``counts.topics``) and the planned workload."""

    frame: pl.DataFrame
    unit: PrivacyUnit
    topics: Mapping[str, int] = field(default_factory=dict)
    slots: Mapping[str, int] = field(default_factory=dict)
    topic_blocks: Mapping[str, Topics] = field(default_factory=dict)
    #: the release's planned workload (`release.counts.workload`; None: every field with the
    #: class over its public bins)
    workload: Workload | None = None


@dataclass(frozen=True)
class MeasuredCounts:
    """What a mode released: its ledger entries, the artifact's ``counts`` block, the
    (epsilon, delta) OpenDP's maps give, and the mode's accounting of them in words (the
    signed scope of a Gaussian selection's reading quotes it; empty: the (epsilon, delta))."""

    entries: list[LedgerEntry]
    block: dict[str, Any]
    epsilon: float
    delta: float
    accounting: str = ""

    @property
    def words(self) -> str:
        """The accounting in words: the mode's, else its (epsilon, delta)."""
        return self.accounting or f"({self.epsilon:.4g}, {self.delta:.3g})-DP"


class CountsMode(Protocol):
    """What the pipeline asks of a counts mode."""

    descriptor: CountsModeDescriptor
    #: how the counts' entries add up, for the ledger's accountant line
    accountant: str

    def measure(self, rows: CountsRows, schema: Schema, counts: CountsConfig,
                budget: CountsBudget) -> MeasuredCounts:
        """Plan the mode's queries from ``counts`` and ``budget`` (data-independent), run
        them through OpenDP, and post-process the noisy counts into the artifact's block."""
        ...


#: the counts modes this release runs: the built-ins, then those of installed plugins
MODES: Registry[CountsMode] = Registry(
    "counts mode", builtins=("release.counts.marginals", "release.counts.model"),
    group=PLUGIN_GROUP)


def register(mode: CountsMode) -> CountsMode:
    """Make ``mode`` a choice: its descriptor in the shared core (where a built-in's is
    declared already), its measurement here."""
    if COUNTS_MODES.find(mode.descriptor.name) is not mode.descriptor:
        register_counts_mode(mode.descriptor, stacklevel=2)
    MODES.add(mode.descriptor.name, mode, stacklevel=2)
    return mode


def get(name: str) -> CountsMode:
    """The mode called ``name``; ValueError (naming the known modes) otherwise."""
    return MODES.get(name)


def measure(rows: CountsRows, schema: Schema, counts: CountsConfig,
            budget: CountsBudget) -> MeasuredCounts:
    """The configured mode's counts, its block stamped with the mode and its description
    (so review and decode read it where the mode is not installed)."""
    mode = get(counts.mode)
    out = mode.measure(rows, schema, counts, budget)
    block = {**out.block, "mode": mode.descriptor.name,
             "mode_description": mode.descriptor.to_json()}
    return MeasuredCounts(out.entries, block, out.epsilon, out.delta, out.accounting)


def load_builtins() -> None:
    """Register the built-in modes, then those of installed plugins (`Registry`)."""
    MODES.load_builtins()


__all__ = ["CountsBudget", "CountsMode", "CountsRows", "MeasuredCounts", "counts_modes",
           "get", "load_builtins", "measure", "register"]
