"""The noisy counts: one module per counts mode, one registry.

- `keys`: the public-key codes every mode counts over (`derive_frame`), and the cohort and
  rate queries the modes share;
- `registry`: the `CountsMode` protocol, its input (`CountsRows`), budget and output, and
  the registry every reader uses;
- `marginals`: Laplace histograms per class, pure epsilon-DP;
- `model`: OpenDP's contingency tables in zCDP (``fixed``, ``aim``, ``mst``).

The registry loads the built-in modes, then the modes of installed plugins (entry-point
group ``selpe_audit.counts_modes``), at its first lookup or `load_builtins`.
"""

from release.counts.registry import (
    CountsBudget,
    CountsMode,
    CountsRows,
    MeasuredCounts,
    counts_modes,
    get,
    load_builtins,
    measure,
    register,
)

__all__ = ["CountsBudget", "CountsMode", "CountsRows", "MeasuredCounts", "counts_modes",
           "get", "load_builtins", "measure", "register"]
