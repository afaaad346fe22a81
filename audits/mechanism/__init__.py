"""Monte-Carlo audit of the release's own OpenDP mechanisms on neighbouring datasets.

For each mechanism: a dataset D and D' = D plus one canary row, the mechanism run many
times on each, a distinguishing test *fixed in advance* (chosen on separate calibration
runs, or by the audit's design), and on fresh runs the empirical epsilon lower bound

    eps_LB = max(0, ln((1 - delta - FNR_U) / FPR_U), ln((1 - delta - FPR_U) / FNR_U))

with FPR_U, FNR_U the upper ends of 95 % Clopper-Pearson intervals. A correct mechanism
gives eps_LB <= eps with 95 % confidence; eps_LB > eps shows, at that confidence, that it
leaks more than claimed. Where the audit is tight (the counts audit: the integer Laplace
count's optimal test reaches eps exactly) a correct mechanism still FAILs by chance in
about 1 % of audits: a marginal FAIL calls for a rerun with more runs.

- ``selection``: SelPE's round as the release runs it: `release.selection.run_selection`
  with the registry's `SelpeMode.round` (the one-class-per-person rule, b = 2 batches by a
  keyed hash of the person id with a fresh key, minmax utilities, OpenDP's noisy max per
  batch, composed by the hand-written `make_parallel_batches`), on the release's own private
  input (`SelpeMode.private_rows`, then `release.stages.selection.private_classes`), person unit,
  numeric kernel channel, on a small public schema (`selection_schema`: two classes). D: 6
  people per class, one row each at x = 25; the pool per class: one candidate at 75 and
  one at 25. The canary is a person with 4 rows in class 0 and 2 in class 1 at x = 100
  (more rows than any count's max_contributions: selpe bounds a person by the one-class
  rule and the utility range, so all 4 home rows reach one batch). Its batch's center
  crosses to 75's side whatever D's rows there, so minmax flips that batch's utilities
  from (-1, 0) to (0, -1), the worst case the L-inf sensitivity allows; its class-1 rows
  are dropped by the rule. The quota equals the pool (k = 1, q = 2), so the winners list
  both batches' votes; the output is whether the candidate at 75 is among each class's
  winners. The test is fixed by this design (no calibration runs; a calibrated choice
  among such rare outputs sometimes picks a weak one): "it is among class 0's winners".
  It errs on D' only when both batches voted 25 (the canary's batch against its
  utilities), so its loss is the noisy max's own: ln((1 - p) / p), p = e^(-eps / 2) / 2, 0.83 at
  epsilon 1, 1.49 at 2 (two candidates, exponential noise at scale 2 / epsilon). The claim
  is OpenDP's map of the round measurement the release builds (at most the configured
  epsilon): the release relies on it to say the round fits its epsilon, so an error in the
  hand-written map shows here: halved to 1 at epsilon 2, eps_LB is ~1.3 (sd 0.06) at 1500
  runs.
- ``counts``: one class-conditional histogram of the release's count plan (OpenDP's
  polars count measurement from `release.dp.counts.make_count`) on a derived
  demo frame; the canary adds one row to one cell; the output is that cell's noisy count;
  the test is a threshold.
- ``pe-histogram`` and ``representatives``: the Gaussian selection round of that mode
  (`GaussianVotesMode.statistics` in `release.selection`: the release's own statistics, kernel
  with numeric channels, OpenDP's Gaussian via `release.dp.gaussian.make_gaussian_round`),
  calibrated like a one-round release to the claimed (epsilon, delta) through the release's
  zCDP conversion (`calibrate_zcdp_budget`: OpenDP's). The claim's rho is the audits' own conversion
  (`audits.stats.zcdp_rho`, CKS20) and the release's must not exceed it
  (`conversion_check`), so an error in the rho -> (epsilon, delta) step FAILs. D holds a
  few rows of one class; the canary is a far-away record, so it votes with full weight
  (pe-histogram: L2 shift 1) or lands at an anchor with an offset clipped to R
  (representatives: L2 shift sqrt(1 + R^2)), the worst case the sensitivity allows.
  The audited output is the noisy statistics vector *before* post-processing into winners
  (a stronger test: post-processing cannot increase the loss), reduced to its projection
  on the direction D -> D' (the Neyman-Pearson statistic for a Gaussian); the test is a
  threshold; eps_LB uses the claimed delta. That bound is loose for a Gaussian (a
  mechanism calibrated to epsilon 2 passed a claim of 1 in every run measured), so these
  modes are also audited in mu (Gaussian DP): the projection is N(m, sigma^2) on D and
  N(m + shift, sigma^2) on D', so mu = shift / sigma is estimated from every run (the
  standardised mean difference) with a 99 % confidence interval; the audit FAILs when the
  interval's lower end exceeds the claimed mu (sqrt(2 rho) of the claim's rho, at the
  worst-case shift). A factor 2 in the noise is caught at
  the default 1000 runs.
- ``model``: the noisy marginals of the model counts modes (`release.counts.model`: the
  "fixed" mode's workload, the class balance and the class's 2-way marginal with each of a
  few fields). The measurement is the release's own: its OpenDP query (the person unit's
  truncation, the column selection, ``contingency_table`` with the release's
  ``CalibratedFixed``) is built on D and invoked once, and the marginals measurement that
  ``CalibratedFixed`` builds inside it (OpenDP's ``make_stable_marginals >>
  then_noise_marginals`` at the scale it takes from OpenDP's map) is kept for its map and
  sensitivities; each run invokes the whole query (truncation included) on D or D', with
  the model fit after the marginals (post-processing) replaced by a no-op. D' = D plus one
  canary row (row unit), or plus a canary person with ``max_contributions`` + 2 identical
  rows (person unit: D holds at most ``max_contributions`` rows per person, so D's counts
  are fixed; the release's truncation cuts the canary to the bound). The truncated canary
  moves one cell of every marginal by its OpenDP sensitivity (the worst case). The
  audited output is the released noisy vectors reduced to the Neyman-Pearson statistic of
  heteroscedastic Gaussians: the projection on the canary's cells, each weighted by the
  inverse variance of its marginal (from the released stddevs); its mean shift is the
  mechanism's mu. The claim: rho of the counts' (epsilon, delta) by the audits' own
  conversion, checked against the release's as for the Gaussian modes (the whole table: no
  cohorts or rates), mu = sqrt(2 rho); audited
  in mu as the Gaussian modes are (and in eps_LB at the claimed delta). At epsilon 1 (mu
  0.22) the default 1000 runs (1500 pooled per dataset) catch a halved noise scale (mu 0.44)
  in all but ~0.03 % of audits, a calibration to epsilon 2 (mu 0.42) in ~99.8 %. Modes
  "aim" and "mst" (``--counts-mode``) are adaptive: each run is the whole algorithm as the
  release builds it (selections, measurements, and the model fits between AIM's rounds,
  shortened to a few mirror-descent steps: post-processing, which changes what AIM selects
  next, never what a round costs) on D or D'; the output is every released marginal,
  centred on D's true counts, projected on the canary's cells over its own variance, so
  its standardised shift is the measured part's mu, bounded by the claim sqrt(2 rho).
- ``release``: the whole composed release, end to end (`audits.release_audit`).

Runs call the OpenDP measurement directly (a Context would stop after its budget): that is
the same randomised algorithm, run many times. OpenDP's noise is never seeded; only the
choice of demo rows is.
"""

from __future__ import annotations

from audits.mechanism.core import (
    CONVERSION_TOLERANCE,
    DEFAULT_DELTA,
    Neighbours,
    Test,
    audit,
    choose_test,
    conversion_check,
    eps_lb_of,
    error_counts,
    render,
)
from audits.mechanism.counts import COUNTS_FIELD, counts_neighbours
from audits.mechanism.gaussian import GAUSSIAN_KINDS, GAUSSIAN_RUNS, gaussian_neighbours
from audits.mechanism.model import (
    ADAPTIVE_MODES,
    ADAPTIVE_RUNS,
    MODEL_MODES,
    MODEL_UNITS,
    model_neighbours,
)
from audits.mechanism.phrases import phrase_neighbours
from audits.mechanism.selection import DEFAULT_CANDIDATES, selection_neighbours

KINDS = ("selection", "counts", "phrases", "keywords", *GAUSSIAN_KINDS, "model")
DEFAULT_RUNS = {"selection": 2000, "counts": 1000, "phrases": 1000, "keywords": 1000,
                **dict.fromkeys(GAUSSIAN_KINDS, GAUSSIAN_RUNS), "model": 1000}

__all__ = [
    "ADAPTIVE_MODES", "ADAPTIVE_RUNS", "CONVERSION_TOLERANCE", "COUNTS_FIELD",
    "DEFAULT_CANDIDATES", "DEFAULT_DELTA", "DEFAULT_RUNS", "GAUSSIAN_KINDS", "GAUSSIAN_RUNS",
    "KINDS", "MODEL_MODES", "MODEL_UNITS", "Neighbours", "Test", "audit", "choose_test",
    "conversion_check", "counts_neighbours", "eps_lb_of", "error_counts", "gaussian_neighbours",
    "model_neighbours", "phrase_neighbours", "render", "selection_neighbours",
]
