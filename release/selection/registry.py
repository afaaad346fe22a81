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
from selpe_audit.artifact.modes import ModeDescriptor, find_mode, mode_names, register_mode
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.kernel.distance import Kernel
from selpe_audit.registry import Registry
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


#: the modes this release runs: the built-ins (their modules, in the default's order), then
#: the modes of installed plugins
MODES: Registry[SelectionMode] = Registry(
    "selection mode", builtins=("release.selection.selpe", "release.selection.pe_histogram",
                                "release.selection.representatives"), group=PLUGIN_GROUP)


def register(mode: SelectionMode) -> SelectionMode:
    """Make ``mode`` selectable: its descriptor in the shared core (where a built-in's is
    declared already), its measurement here."""
    if find_mode(mode.descriptor.name) is not mode.descriptor:
        register_mode(mode.descriptor, stacklevel=2)
    MODES.add(mode.descriptor.name, mode, stacklevel=2)
    return mode


def get(name: str) -> SelectionMode:
    """The mode called ``name``; ValueError (naming the known modes) otherwise."""
    return MODES.get(name)


def selection_modes() -> tuple[SelectionMode, ...]:
    """The modes this release can run, in the shared core's order (selpe first)."""
    return tuple(MODES.get(name) for name in mode_names() if name in MODES)


def load_builtins() -> None:
    """Register the built-in modes, then those of installed plugins (`Registry`)."""
    MODES.load_builtins()
