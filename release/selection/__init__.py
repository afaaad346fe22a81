"""DP selection of synthetic exemplars: SelPE's Algorithm 1 and its round mechanisms.

- `loop`: Algorithm 1 (rounds, quotas, candidates, winners, partners), mode-agnostic;
- `registry`: the `SelectionMode` protocol and the registry every reader uses;
- `selpe`, `pe_histogram`, `representatives`: one module per mode, each registering itself
  (`gaussian`: what the two zCDP modes share);
- `accounting`: how rounds add up (pure epsilon or zCDP -> (epsilon, delta));
- `candidates`: where candidates come from (public pool or local LLM);
- `types`: the shared data types.

The registry loads the built-in modes, then the modes of installed plugins (entry-point
group ``selpe_audit.selection_modes``), at its first lookup or `load_builtins`. Modules here
import `release.config_sections`, `release.ledger`, `release.dp` (every OpenDP call)
and the shared core, and never the package itself, so there are no cycles (import-linter
checks it).
"""

from release.selection.candidates import CandidateSource, LLMSource, PoolSource
from release.selection.loop import run_selection
from release.selection.registry import (
    SelectionMode,
    get,
    load_builtins,
    register,
    selection_modes,
)
from release.selection.types import (
    OneClassPerUnit,
    PrivateClasses,
    RoundOutput,
    SelectionRun,
    unit_ids,
)

__all__ = ["CandidateSource", "LLMSource", "OneClassPerUnit", "PoolSource",
           "PrivateClasses", "RoundOutput", "SelectionMode", "SelectionRun", "get",
           "load_builtins", "register", "run_selection", "selection_modes", "unit_ids"]
