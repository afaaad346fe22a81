"""The release's one adapter to OpenDP.

- `mechanisms`: every OpenDP measurement the release builds (count queries through the
  polars front-end, the selection's noisy max and Gaussian rounds, compositors, the zCDP
  conversion) and the privacy unit's bound;
- `calibration`: the one function that finds a noise scale from OpenDP's privacy map;
- `compat`: the only use of OpenDP's internals, pinned by `tests/test_opendp_compat.py`.

OpenDP's "contrib" features are turned on once, by `enable` at each command's entry
(`release`, `audit`, `doctor`) and by `release.pipeline.run_release`, not as a side effect
of an import.
"""

from __future__ import annotations

import opendp.prelude as dp


def enable() -> None:
    """Turn on OpenDP's "contrib" features (its polars front-end, mbi, noisy max), which
    every mechanism here needs; idempotent."""
    dp.enable_features("contrib")
