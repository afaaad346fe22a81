"""The release's one adapter to OpenDP: no other module of the project imports ``opendp``
(an import-linter contract in pyproject.toml; its few named exceptions say why).

By mechanism family, ``make_*`` builds an OpenDP measurement (or Context), ``measure_*`` and
``release_*`` run one, ``calibrate_*`` finds a noise scale or a budget from OpenDP's maps:

- `counts`: count queries through the polars front-end (Laplace, or Gaussian in zCDP), the
  dataset's size, the Context over the key codes;
- `partition`: the phrase vocabulary's thresholded counts (partition selection) and their
  threshold search;
- `noisy_max`: the selection's pure-DP rounds (report-noisy-max per batch, parallel batches,
  the adaptive compositor);
- `gaussian`: the Gaussian selection rounds; `zcdp`: their compositor and OpenDP's rho-zCDP ->
  (epsilon, delta) conversion (the counts' model modes use it too);
- `tables`: the model counts modes' contingency tables (``opendp.extras.mbi``): Fixed with a
  calibrated scale, AIM, MST, the table query and the slot AIM/MST do not overrun;
- `unit`: the privacy unit's bound; `spools`: the private files OpenDP's Contexts scan;
  `user`: the user-defined OpenDP objects (built under "honest-but-curious");
- `calibration`: the one function that finds a noise scale from OpenDP's privacy map;
- `compat`: the only use of OpenDP's internals, pinned by `tests/test_opendp_compat.py`.

OpenDP's "contrib" features are turned on once, by `enable` at each command's entry
(`release`, `audit`, `doctor`) and by `release.pipeline.run_release`, not as a side effect
of an import.
"""

from __future__ import annotations

from release.dp import prelude as dp

#: OpenDP's measurement type, for annotations outside this package
Measurement = dp.Measurement
#: what OpenDP raises (a refused budget, a failed plan)
OpenDPException = dp.OpenDPException


def enable() -> None:
    """Turn on OpenDP's "contrib" features (its polars front-end, mbi, noisy max), which
    every mechanism here needs; idempotent."""
    dp.enable_features("contrib")
