"""The noisy counts: one module per counts mode, one registry.

- `keys`: the public-key codes every mode counts over (`derive_frame`), and the cohort and
  rate queries the modes share;
- `registry`: the `CountsMode` protocol, its input (`CountsRows`), budget and output, and
  the registry every reader uses;
- `marginals`: Laplace histograms per class, pure epsilon-DP;
- `model`: OpenDP's contingency tables in zCDP (``fixed``, ``aim``, ``mst``).

Importing the package registers the built-in modes, then the modes of installed plugins
(entry-point group ``selpe_audit.counts_modes``, `registry.load_plugins`).
"""

from release.counts import marginals, model
from release.counts.registry import (
    CountsBudget,
    CountsMode,
    CountsRows,
    MeasuredCounts,
    counts_modes,
    get,
    load_plugins,
    measure,
    register,
)

load_plugins()

__all__ = ["CountsBudget", "CountsMode", "CountsRows", "MeasuredCounts", "counts_modes",
           "get", "load_plugins", "marginals", "measure", "model", "register"]
