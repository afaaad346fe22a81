"""The selection modes: one protocol, one registry.

A mode is its public `ModeDescriptor` (name, accounting, words, artifact block schema; kept
in the shared core so the review knows it without this package) plus what only the enclave
runs: the round's OpenDP measurement, its ledger entries and its artifact block. `register`
puts both in place, so a new mode is one module that calls it: the CLI choices, the config
check, the artifact schema, the review page and the loop all read the registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from release.config_sections import SelectionConfig
from release.selection.types import Pools, RoundOutput, SelectionRun
from selpe_audit.artifact.modes import ModeDescriptor, describe, mode_names, register_mode
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.kernel.distance import Kernel
from selpe_audit.plugins import load_plugins as _load
from selpe_audit.schema import Schema

#: Entry-point group of selection modes in other packages: each names a module that calls
#: `register` when imported (``[project.entry-points."selpe_audit.selection_modes"]``).
PLUGIN_GROUP = "selpe_audit.selection_modes"

if TYPE_CHECKING:  # a type only: OpenDP is called from release.dp
    from release.dp import Measurement


class SelectionMode(Protocol):
    """What the loop and the pipeline ask of a mode."""

    descriptor: ModeDescriptor
    #: the OpenDP constructor of one round, as the ledger and the accounting name it
    constructor: str

    def private_rows(self, priv_rows: pl.DataFrame, schema: Schema,
                     person_field: str | None) -> pl.DataFrame:
        """The rows the mode may read (e.g. selpe keeps one class per person), a frame typed
        by the schema."""
        ...

    def round(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools, t: int,
              budget: float) -> tuple[Measurement, RoundOutput]:
        """Round t's OpenDP measurement on `PrivateClasses` (output: per class, candidate
        indices best first) and its accounting; ``budget`` is epsilon_t (pure) or rho_t
        (zCDP), the round's slot in the compositor."""
        ...

    def ledger_entries(self, cfg: SelectionConfig, run: SelectionRun) -> list[LedgerEntry]:
        """One entry per round (a zCDP conversion entry is the accounting's)."""
        ...

    def artifact_block(self, cfg: SelectionConfig) -> Any | None:
        """The mode's own block in ``selection`` (under ``descriptor.block_key``): a record
        of the descriptor's ``block`` class, or None."""
        ...


_MODES: dict[str, SelectionMode] = {}


def register(mode: SelectionMode) -> SelectionMode:
    """Make ``mode`` selectable: its descriptor in the shared core, its measurement here."""
    register_mode(mode.descriptor)
    _MODES[mode.descriptor.name] = mode
    return mode


def get(name: str) -> SelectionMode:
    """The mode called ``name``; ValueError (naming the known modes) otherwise."""
    describe(name)  # the message names every mode
    if name not in _MODES:
        raise ValueError(f"selection mode '{name}' has no measurement in this release")
    return _MODES[name]


def selection_modes() -> tuple[SelectionMode, ...]:
    """The modes this release can run, in the shared core's order (selpe first)."""
    return tuple(_MODES[name] for name in mode_names() if name in _MODES)


def load_plugins() -> None:
    """Import the selection modes of installed plugins (each registers itself)."""
    _load(PLUGIN_GROUP, "selection mode")
