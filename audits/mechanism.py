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
  batch, composed by the hand-written `parallel_batches`), on the release's own private
  input (`SelpeMode.private_rows`, then `release.pipeline._private_classes`), person unit,
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
  polars count measurement from `release.dp.mechanisms.count_measurement`) on a derived
  demo frame; the canary adds one row to one cell; the output is that cell's noisy count;
  the test is a threshold.
- ``pe-histogram`` and ``representatives``: the Gaussian selection round of that mode
  (`GaussianVotesMode.statistics` in `release.selection`: the release's own statistics, kernel
  with numeric channels, OpenDP's Gaussian via `release.dp.mechanisms.gaussian_round`),
  calibrated like a one-round release to the claimed (epsilon, delta) through the release's
  zCDP conversion (`zcdp_budget`: OpenDP's). The claim's rho is the audits' own conversion
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

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl
from rich.console import Console
from rich.table import Table

from audits.stats import (
    CONFIDENCE,
    MU_CONFIDENCE,
    clopper_pearson,
    eps_lower_bound,
    mu_audit,
    zcdp_rho,
)
from release.config import CountsConfig, SelectionConfig
from release.counts import counts_modes
from release.counts import get as counts_mode
from release.counts.keys import CLASS_COL, UNIT_COL, derive_frame, key_col, public_values
from release.counts.marginals import plan_queries
from release.counts.model import (
    CalibratedFixed,
    ModelMode,
    model_columns,
    table_query,
    working_slot,
)
from release.dp.mechanisms import (
    COUNT_COLUMN,
    NOISY_MAX_CONSTRUCTOR,
    PrivacyUnit,
    count_measurement,
    gaussian_round,
    gaussian_scale,
    new_context,
    zcdp_budget,
)
from release.phrases import PHRASE_COL, phrase_measurement, term_frame
from release.pipeline import _private_classes
from release.selection import (
    OneClassPerUnit,
    PoolSource,
    PrivateClasses,
    SelectionRun,
    get,
    run_selection,
    selection_modes,
)
from release.selection.gaussian import GaussianVotesMode
from release.selection.selpe import batch_utilities
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.schema import Schema, parse_schema

#: The Gaussian selection modes of the registry: each is audited through its statistics.
GAUSSIAN_KINDS = tuple(m.descriptor.name for m in selection_modes()
                       if isinstance(m, GaussianVotesMode))
KINDS = ("selection", "counts", "phrases", "keywords", *GAUSSIAN_KINDS, "model")
GAUSSIAN_RUNS = 1000
DEFAULT_RUNS = {"selection": 2000, "counts": 1000, "phrases": 1000, "keywords": 1000,
                **dict.fromkeys(GAUSSIAN_KINDS, GAUSSIAN_RUNS), "model": 1000}
PHRASE = "fever"  # the audited phrase of `phrase_neighbours`
KEYWORD_TEXT, KEYWORDS = "fever and cough", ["fever", "cough"]  # its keyword case
PHRASE_UNITS = 300
DEFAULT_DELTA = 1e-6  # the release's default for the Gaussian modes
#: how far (relative) the release's rho for a claimed (epsilon, delta) may exceed the audits'
#: own conversion's: OpenDP and `audits.stats.zcdp_rho` agree to ~1e-14
CONVERSION_TOLERANCE = 1e-9
#: The selection audit (see module): a round's pool per class, b batches, D's people per
#: class, the canary's rows in its home class and in the other, and where they all sit.
#: Two candidates and two batches reveal the most per run: the winners list both votes.
DEFAULT_CANDIDATES = 2
SELECTION_BATCHES = 2
SELECTION_PERSONS = 6
SELECTION_CANARY_ROWS = (4, 2)
SELECTION_X = {"D": 25, "toward_canary": 75, "canary": 100}
COUNTS_FIELD = "age"
COUNTS_ROWS = 200
#: The model audit's columns besides the class: a small domain keeps a run at milliseconds
MODEL_FIELDS = ("age", "sex")
MODEL_ROWS = 200
MODEL_UNITS = ("row", "person")
MODEL_MAX_CONTRIBUTIONS = 2  # person unit: OpenDP's truncation bound
MODEL_CANARY_EXTRA_ROWS = 2  # person unit: the canary's rows beyond it, cut by the release
#: the counts modes this audit's model kind tests (their descriptors' ``audit``)
MODEL_MODES = tuple(d.name for d in counts_modes() if d.audit == "model")
#: those whose whole adaptive algorithm is audited per run (AIM, MST)
ADAPTIVE_MODES = tuple(m for m in MODEL_MODES if getattr(counts_mode(m), "adaptive", False))
MODEL_AIM_ROUNDS = 2       # aim: rounds per audited release (each refits the model)
MODEL_QUICK_FIT_ITERS = 20  # aim and mst: mirror-descent steps per fit inside a run
#: aim and mst: ~3 s a run on 2 cores (OpenDP builds each round's measurement when it runs);
#: 100 + 100 runs per dataset give mu's 99 % interval +-0.26: a factor 2 at epsilon 2 shows
ADAPTIVE_RUNS = 100
ADAPTIVE_RETRIES = 5  # a run OpenDP refuses (opendp #2789: a float overrun) is run again

Sampler = Callable[[int], np.ndarray]  # n -> n outputs of the mechanism


@dataclass(frozen=True)
class Neighbours:
    """A mechanism on D and on D' (= D + canary), plus what the audit should record."""

    name: str
    claimed_epsilon: float
    run_d: Sampler
    run_dprime: Sampler
    output: str  # "categorical" (a set test) or "scalar" (a threshold test)
    details: dict[str, Any]
    claimed_delta: float = 0.0
    claimed_mu: float | None = None  # Gaussian modes: also audited in mu
    test: Test | None = None  # fixed by the audit's design: no calibration runs


@dataclass(frozen=True)
class Test:
    """'Predict D'' iff the output is in ``accept`` (categorical) or >= ``threshold``."""

    accept: tuple[int, ...] | None = None
    threshold: float | None = None

    def __call__(self, y: np.ndarray) -> np.ndarray:
        if self.accept is not None:
            return np.isin(y, self.accept)
        assert self.threshold is not None
        return y >= self.threshold

    def describe(self) -> str:
        if self.accept is not None:
            return f"predict D' iff the output's code is in {list(self.accept)}"
        return f"predict D' iff the noisy statistic is >= {self.threshold:g}"


def error_counts(test: Test, y_d: np.ndarray, y_dp: np.ndarray) -> tuple[int, int]:
    """(false positives on D, false negatives on D')."""
    return int(np.sum(test(y_d))), int(np.sum(~test(y_dp)))


def eps_lb_of(fp: int, n_d: int, fn: int, n_dp: int, delta: float = 0.0,
              confidence: float = CONFIDENCE) -> dict[str, Any]:
    fpr_ci, fnr_ci = clopper_pearson(fp, n_d, confidence), clopper_pearson(fn, n_dp, confidence)
    return {"fp": fp, "fn": fn, "fpr": fp / n_d, "fnr": fn / n_dp, "fpr_ci": list(fpr_ci),
            "fnr_ci": list(fnr_ci), "confidence": confidence,
            "eps_lb": eps_lower_bound(fpr_ci[1], fnr_ci[1], delta)}


def choose_test(y_d: np.ndarray, y_dp: np.ndarray, output: str, delta: float = 0.0) -> Test:
    """The test with the largest eps_LB on the calibration runs.

    Categorical: sets of outputs, taken in decreasing order of the empirical likelihood ratio
    P(y | D') / P(y | D) (Neyman-Pearson). Scalar: thresholds at every observed value.
    """
    if output == "categorical":
        values = np.union1d(y_d, y_dp)
        ratio = [(np.sum(y_dp == v) + 0.5) / (np.sum(y_d == v) + 0.5) for v in values]
        order = [int(v) for _, v in sorted(zip(ratio, values, strict=True), reverse=True)]
        tests = [Test(accept=tuple(sorted(order[:k]))) for k in range(1, len(order))]
    else:
        tests = [Test(threshold=float(t)) for t in np.union1d(y_d, y_dp)[1:]]
    if not tests:  # every run gave the same output: nothing distinguishes D from D'
        return Test(accept=(int(y_d[0]),)) if output == "categorical" else Test(threshold=math.inf)

    def score(t: Test) -> float:
        fp, fn = error_counts(t, y_d, y_dp)
        return eps_lb_of(fp, len(y_d), fn, len(y_dp), delta)["eps_lb"]

    return max(tests, key=score)


def audit(nb: Neighbours, runs: int, calibration_runs: int | None = None,
          delta: float | None = None, confidence: float = CONFIDENCE,
          mu_confidence: float = MU_CONFIDENCE) -> dict[str, Any]:
    """Calibrate a test, then measure eps_LB on fresh runs; FAIL if it exceeds the claim.

    ``delta`` defaults to the mechanism's claimed delta (0 for the pure-DP ones). A correct
    mechanism FAILs by chance with probability at most about 1 - ``confidence`` (the
    Clopper-Pearson intervals of eps_LB) plus (1 - ``mu_confidence``) / 2 (mu's interval,
    Gaussian mechanisms only); tests that must not fail by chance raise both. A Gaussian
    mechanism also FAILs when the release's zCDP conversion exceeds the independent one
    (``details["conversion"]``, `conversion_check`)."""
    delta = nb.claimed_delta if delta is None else delta
    cal = calibration_runs if calibration_runs is not None else max(100, runs // 2)
    t0 = time.perf_counter()
    if nb.test is not None:  # the design's test: nothing to calibrate
        cal, test = 0, nb.test
        y_cal_d = y_cal_dp = np.empty(0)
    else:
        y_cal_d, y_cal_dp = nb.run_d(cal), nb.run_dprime(cal)
        test = choose_test(y_cal_d, y_cal_dp, nb.output, delta)
    y_d, y_dp = nb.run_d(runs), nb.run_dprime(runs)
    fp, fn = error_counts(test, y_d, y_dp)
    res = eps_lb_of(fp, runs, fn, runs, delta, confidence)
    mu = None
    if nb.claimed_mu is not None:  # every run estimates the shift: calibration runs too
        mu = mu_audit(np.r_[y_cal_d, y_d], np.r_[y_cal_dp, y_dp], nb.claimed_mu,
                      mu_confidence)
    return {
        "mechanism": nb.name,
        "claimed_epsilon": nb.claimed_epsilon,
        "delta": delta,
        "runs_per_dataset": runs,
        "calibration_runs_per_dataset": cal,
        "test": test.describe(),
        **res,
        **({"mu": mu} if mu is not None else {}),
        "passed": res["eps_lb"] <= nb.claimed_epsilon and (mu is None or mu["passed"])
        and nb.details.get("conversion", {}).get("passed", True),
        "seconds": time.perf_counter() - t0,
        "details": nb.details,
    }


# ----- selection: SelPE's round through the release's loop ---------------------------------

def selection_schema() -> Schema:
    """The selection audit's public schema: a person id, one numeric field, two classes."""
    return parse_schema({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "selection_audit", "description": "Fictional people for the selection audit.",
        "type": "object", "x-label": "cls", "x-id": "person",
        "properties": {
            "person": {"type": "string", "maxLength": 16, "description": "fictional person"},
            "x": {"type": "integer", "minimum": 0, "maximum": 100, "description": "a value"},
            "cls": {"type": "integer", "enum": [0, 1], "description": "class"},
        },
        "required": ["person", "x", "cls"], "additionalProperties": False,
    }, "selection audit")


def _code(run: SelectionRun, toward_canary: dict[str, Any], home: Any) -> int:
    """A run's output: 2 if the candidate toward the canary is among the home class's
    winners, plus 1 if it is among the other class's."""
    has = {c.class_value: {**toward_canary, "cls": c.class_value} in c.winners
           for c in run.rounds[0].classes}
    return 2 * has[home] + sum(v for c, v in has.items() if c != home)


def selection_neighbours(epsilon: float, calibrate_to: float | None = None,
                         n_candidates: int = DEFAULT_CANDIDATES,
                         batches: int = SELECTION_BATCHES) -> Neighbours:
    """SelPE's round as the release runs it (see module) at ``calibrate_to`` (default: the
    claim) on D and D' = D + the canary person. The claim is the smaller of ``epsilon`` and
    OpenDP's map of the round measurement the release builds (`SelpeMode.round`)."""
    if n_candidates < 2 or batches < 2:
        raise ValueError("the selection audit needs at least 2 candidates and 2 batches")
    schema = selection_schema()
    home, other = schema.classes
    kernel = Kernel(schema, None, KernelConfig(channels="numeric"))
    toward_canary, toward_d = {"x": SELECTION_X["toward_canary"]}, {"x": SELECTION_X["D"]}
    pool = [{**r, "cls": c} for c in schema.classes
            for r in [toward_canary, *[toward_d] * (n_candidates - 1)]]
    source = PoolSource(schema, pool, "selection-audit-pool")
    rows = [{"person": f"p{c}-{i}", "x": SELECTION_X["D"], "cls": c}
            for c in schema.classes for i in range(SELECTION_PERSONS)]
    canary = [{"person": "canary", "x": SELECTION_X["canary"], "cls": c}
              for c, n in ((home, SELECTION_CANARY_ROWS[0]), (other, SELECTION_CANARY_ROWS[1]))
              for _ in range(n)]
    cfg = SelectionConfig(rounds=1, k=1, q=float(n_candidates), batches=batches,
                          settings={"utility": "minmax"}, channels="numeric")
    mode = get(cfg.mode)
    eps_run = float(calibrate_to if calibrate_to is not None else epsilon)
    # as the release: the mode's per-person rows, then the private features per class
    privs = [_private_classes(mode.private_rows(pl.DataFrame(data), schema, schema.id_field),
                              schema, kernel, schema.id_field) for data in (rows, [*rows, *canary])]
    feats = kernel.featurize(pool[:n_candidates])
    pools = {c: (feats, kernel.fit_scale(feats)) for c in schema.classes}  # fixed order
    measurement, _ = mode.round(cfg, kernel, pools, 1, cfg.round_epsilons(eps_run)[0])
    opendp_eps = float(measurement.map(1))
    one = {name: batch_utilities(OneClassPerUnit(p), kernel, pools, home, 0, 1, b"audit",
                                 cfg.settings.utility).tolist()  # all rows in one batch: the flip
           for name, p in zip(("D", "D'"), privs, strict=True)}
    if one["D"][0] != -1.0 or one["D'"][0] != 0.0 or max(one["D'"][1:]) != -1.0:
        raise RuntimeError("the canary does not flip its batch's utilities")
    def sampler(priv: PrivateClasses) -> Sampler:
        def one_run() -> int:
            return _code(run_selection(schema, priv, kernel, source, cfg, eps_run),
                         toward_canary, home)
        return lambda n: np.fromiter((one_run() for _ in range(n)), dtype=np.int64, count=n)

    details = {
        "mode": cfg.mode, "batches": batches, "candidates": n_candidates, "rounds": 1,
        "quota": cfg.quota(1), "utility": cfg.settings.utility, "unit": "person",
        "kernel_channels": kernel.channels, "persons_in_D_per_class": SELECTION_PERSONS,
        "canary_rows": {str(home): SELECTION_CANARY_ROWS[0],
                        str(other): SELECTION_CANARY_ROWS[1]},
        "utilities_one_batch": one, "calibrated_to_epsilon": eps_run,
        "opendp_epsilon_of_round": opendp_eps,
        "constructor": "release.selection.run_selection >> SelpeMode.round ("
                       f"{NOISY_MAX_CONSTRUCTOR})",
        "output": "2 if the candidate toward the canary is among the home class's winners, "
                  "+ 1 if among the other class's"}
    return Neighbours(name="selection", claimed_epsilon=min(float(epsilon), opendp_eps),
                      run_d=sampler(privs[0]), run_dprime=sampler(privs[1]),
                      output="categorical", details=details, test=Test(accept=(2, 3)))


# ----- counts: one OpenDP histogram cell ---------------------------------------------------

def counts_neighbours(schema: Schema, epsilon: float, field: str = COUNTS_FIELD,
                      n_rows: int = COUNTS_ROWS, calibrate_to: float | None = None,
                      seed: int = 0) -> Neighbours:
    """A class-conditional histogram of ``field`` from the release's count plan, measured by
    OpenDP with the whole budget ``calibrate_to`` (default: the claim) on D and D'."""
    counts = CountsConfig(mode="marginals")
    qid = f"counts/histogram/{field}"
    plan = {q.id: q for q in plan_queries(schema, counts, epsilon)}
    if qid not in plan:
        raise ValueError(f"the count plan has no histogram of '{field}'")
    eps_q = calibrate_to if calibrate_to is not None else epsilon
    query = dataclasses.replace(plan[qid], epsilon=eps_q)
    rows = generate_rows(n_rows, seed)
    canary = generate_rows(1, seed + 1)[0]
    unit = PrivacyUnit()
    f = schema.field(field)
    cls = schema.classes.index(canary[schema.label])
    key = f.enum.index(canary[field]) if f.kind == "categorical" else f.bin_index(canary[field])
    cell = (pl.col(CLASS_COL) == cls) & (pl.col(key_col(field)) == key)
    samplers, scales = [], []
    for data in (rows, [*rows, canary]):
        frame = derive_frame(data, schema, counts, None).collect().lazy()
        m = count_measurement(new_context(frame, unit, [eps_q]), unit, query)
        scales.append(float(m.map(1)))

        def run(n: int, m: Any = m, frame: pl.LazyFrame = frame) -> np.ndarray:
            return np.fromiter((m(frame).collect().filter(cell)[COUNT_COLUMN].item()
                                for _ in range(n)), dtype=np.int64, count=n)

        samplers.append(run)
    details = {"query": qid, "cell": {"class": schema.classes[cls],
                                      field: public_values(f)[key]},
               "rows_in_D": n_rows, "constructor": "opendp.extras.polars: group_by().agg("
               "dp.len()) via release.dp.mechanisms.count_measurement",
               "calibrated_to_epsilon": eps_q, "opendp_epsilon_at_d_in_1": scales[0]}
    return Neighbours(name="counts", claimed_epsilon=epsilon, run_d=samplers[0],
                      run_dprime=samplers[1], output="scalar", details=details)


def phrase_neighbours(epsilon: float, delta: float = DEFAULT_DELTA,
                      calibrate_to: float | None = None, n_units: int = PHRASE_UNITS,
                      kind: str = "phrases") -> Neighbours:
    """The release's DP phrase or keyword vocabulary (`release.phrases`: the same frame,
    truncation, OpenDP partition-selection query and calibration, built once per dataset and
    invoked per run) at ``calibrate_to`` (default: the claim), row unit, on D (``n_units``
    rows write the audited text, as many write texts of their own) and D' = D + one canary
    row writing it. Phrases: the text is one phrase, one term per unit. Keywords: the text
    holds two keywords and each unit counts for 2 (above the default 1: the harder case),
    so the canary moves two counts. The output is the sum of the audited terms' released
    noisy counts (0 for a term under the threshold: far above it here, so the audit sees
    the counts' noise); the test is a threshold; eps_LB uses the claimed delta (the
    threshold's share)."""
    eps_cal = calibrate_to if calibrate_to is not None else epsilon
    text, audited, per_unit = (PHRASE, [PHRASE], 1) if kind == "phrases" else \
        (KEYWORD_TEXT, KEYWORDS, len(KEYWORDS))
    texts = [text] * n_units + [f"a text of its own {i}" for i in range(n_units)]
    samplers, thresholds = [], []
    for data in (texts, [*texts, text]):
        frame = term_frame(pl.Series(data), PrivacyUnit(), None, kind).collect().lazy()
        _, m = phrase_measurement(frame, eps_cal, delta, per_unit=per_unit)
        thresholds.append(int(dp.summarize_polars_measurement(m)["threshold"][0]))

        def run(n: int, m: Any = m, frame: pl.LazyFrame = frame) -> np.ndarray:
            def one() -> int:
                out = m(frame).collect().filter(pl.col(PHRASE_COL).is_in(audited))
                return int(out["dp_count"].sum())
            return np.fromiter((one() for _ in range(n)), dtype=np.int64, count=n)

        samplers.append(run)
    details = {"audited_terms": audited, "text_rows_in_D": n_units, "rows_in_D": 2 * n_units,
               "unit": "row", "per_unit": per_unit,
               "constructor": "release.phrases.phrase_measurement (opendp.extras.polars: "
               "group_by(term).agg(dp.len()) with OpenDP's threshold)",
               "calibrated_to_epsilon": eps_cal, "threshold": thresholds[0]}
    return Neighbours(name=kind, claimed_epsilon=epsilon, run_d=samplers[0],
                      run_dprime=samplers[1], output="scalar", details=details,
                      claimed_delta=delta)


# ----- Gaussian selection modes: the noisy statistics of one round -------------------------

def conversion_check(epsilon: float, delta: float) -> dict[str, Any]:
    """The claim in rho for (``epsilon``, ``delta``) from the audits' own conversion
    (`audits.stats.zcdp_rho`, CKS20), beside the release's (`zcdp_budget`, OpenDP's), which
    sets the noise: it passes when the release's rho is at most the claim's (to
    ``CONVERSION_TOLERANCE``), so an error in the release's rho -> (epsilon, delta) step
    FAILs the audit instead of moving its claim."""
    claimed = zcdp_rho(float(epsilon), delta)
    release = zcdp_budget(float(epsilon), delta, [1.0])[0]
    return {"claimed_rho": claimed, "claimed_mu": math.sqrt(2 * claimed),  # rho = mu^2 / 2
            "conversion": {"independent_rho": claimed, "release_rho": release,
                           "tolerance": CONVERSION_TOLERANCE,
                           "passed": release <= claimed * (1 + CONVERSION_TOLERANCE)}}


def _far_canary(schema: Schema, template: dict[str, Any]) -> dict[str, Any]:
    """``template`` with every numeric field at its public maximum (far from demo rows)."""
    canary = dict(template)
    for f in schema.by_kind("numeric"):
        assert f.maximum is not None
        canary[f.name] = int(f.maximum) if f.is_integer else float(f.maximum)
    return canary


def gaussian_neighbours(schema: Schema, mode: str, epsilon: float, delta: float = DEFAULT_DELTA,
                        calibrate_to: float | None = None, n_rows: int = 6,
                        n_candidates: int = 6, seed: int = 0,
                        scale_factor: float = 1.0) -> Neighbours:
    """One round of ``mode`` on D and D' = D + a far canary, calibrated by OpenDP (one-round
    zCDP budget converted at ``delta``) to ``calibrate_to`` (default: the claim).
    ``scale_factor`` multiplies the noise scale (0.5: a planted factor-2 error)."""
    release_mode = get(mode)
    if not isinstance(release_mode, GaussianVotesMode):
        raise ValueError(f"not a Gaussian selection mode: {mode}")
    kernel = Kernel(schema, None, KernelConfig(channels="numeric"))
    fields = {f.name for f in schema.record_fields}
    rows = [{k: v for k, v in r.items() if k in fields} for r in generate_rows(200, seed)]
    c = rows[0][schema.label]
    same = [r for r in rows if r[schema.label] == c]
    cand, priv_rows = same[:n_candidates], same[n_candidates:n_candidates + n_rows]
    canary = _far_canary(schema, priv_rows[0])
    cand_features = kernel.featurize(cand)
    pools = {c: (cand_features, kernel.fit_scale(cand_features))}
    cfg = SelectionConfig(rounds=1, k=n_candidates, mode=mode,
                          settings={"anchors": 2} if mode == "representatives" else None)
    stats = release_mode.statistics(cfg, kernel, pools, 1)
    eps_cal = calibrate_to if calibrate_to is not None else epsilon
    rho = zcdp_budget(eps_cal, delta, [1.0])[0]
    scale = gaussian_scale(stats.sensitivity, rho) * scale_factor
    m = gaussian_round(stats.sensitivity, scale, stats.vectorize, lambda v: np.asarray(v))
    datasets = [PrivateClasses({c: kernel.featurize_private(data)},
                               {c: [f"u{j}" for j in range(len(data))]})
                for data in (priv_rows, [*priv_rows, canary])]
    v_d, v_dp = (np.asarray(stats.vectorize(p)) for p in datasets)
    shift = float(np.linalg.norm(v_dp - v_d))
    if shift > stats.sensitivity * (1 + 1e-9):
        raise RuntimeError("the canary moved the statistics by more than the sensitivity")
    direction = (v_dp - v_d) / shift

    def sampler(p: PrivateClasses) -> Sampler:
        return lambda n: np.fromiter((float(np.dot(m(p), direction)) for _ in range(n)),
                                     dtype=np.float64, count=n)

    details = {"mode": mode, "rows_in_D": n_rows, "candidates": n_candidates,
               "kernel_channels": kernel.channels, "sensitivity": stats.sensitivity,
               "canary_l2_shift": shift, "noise_scale": scale, "rho": float(m.map(1)),
               "mu": stats.sensitivity / scale, "calibrated_to_epsilon": eps_cal,
               "delta": delta, "constructor": "release.dp.mechanisms.gaussian_round "
               "(OpenDP make_gaussian, zCDP) on the mode's release.selection statistics",
               "output": "projection of the noisy statistics on the D -> D' direction"}
    details.update(conversion_check(epsilon, delta))
    return Neighbours(name=mode, claimed_epsilon=epsilon, run_d=sampler(datasets[0]),
                      run_dprime=sampler(datasets[1]), output="scalar", details=details,
                      claimed_delta=delta, claimed_mu=details["claimed_mu"])


# ----- model counts modes: the noisy marginals of the Fixed workload -----------------------

@dataclass(kw_only=True, frozen=True)
class _KeptFixed(CalibratedFixed):
    """The release's ``CalibratedFixed``, keeping the first marginals measurement it builds
    (and the input domain, metric and distance OpenDP hands it): its map and sensitivities.
    OpenDP builds one per invocation of the query; later ones are the same."""

    kept: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def make_marginals(self, input_domain: Any, input_metric: Any, output_measure: Any,
                       d_in: Any, d_out: float, *, marginals: Any, model: Any) -> Any:
        m = super().make_marginals(input_domain, input_metric, output_measure, d_in, d_out,
                                   marginals=marginals, model=model)
        if not self.kept:
            self.kept.append({"measurement": m, "input_domain": input_domain,
                              "input_metric": input_metric, "output_measure": output_measure,
                              "d_in": d_in, "d_out": d_out})
        return m


def _no_fit(domain: Any, measurements: Any, potentials: Any = None) -> Any:
    """Stands in for the model fit (post-processing of the released marginals, not
    audited): an all-zero model over the domain, which costs nothing."""
    from mbi import CliqueVector, MarkovRandomField

    zeros = CliqueVector.zeros(domain, [tuple(domain.attrs)[:1]])
    return MarkovRandomField(potentials=zeros, marginals=zeros)


def model_neighbours(schema: Schema, epsilon: float, delta: float = DEFAULT_DELTA,
                     unit: str = "row", calibrate_to: float | None = None,
                     scale_factor: float = 1.0, fields: tuple[str, ...] = MODEL_FIELDS,
                     n_rows: int = MODEL_ROWS,
                     max_contributions: int = MODEL_MAX_CONTRIBUTIONS,
                     seed: int = 0, mode: str = "fixed") -> Neighbours:
    """A model counts mode's noisy marginals (see module) on D and D' = D + a canary row or
    person, calibrated by the release to the counts' rho for ``calibrate_to`` (default: the
    claim) at ``delta``. ``scale_factor`` multiplies the noise scale (0.5: a planted
    factor-2 error; the release's calibration runs at rho / scale_factor^2). ``mode``
    "aim" or "mst": the whole adaptive algorithm per run (`_adaptive`)."""
    if unit not in MODEL_UNITS:
        raise ValueError(f"unit must be one of {', '.join(MODEL_UNITS)}")
    if mode not in MODEL_MODES:
        raise ValueError(f"mode must be one of {', '.join(MODEL_MODES)}")
    person = unit == "person"
    if person and schema.id_field is None:
        raise ValueError("the person unit needs a schema with a person id (x-id)")
    if not scale_factor > 0:
        raise ValueError("scale_factor must be > 0")
    counts = CountsConfig(mode=mode, aim_rounds=MODEL_AIM_ROUNDS)
    model_mode = counts_mode(mode)
    assert isinstance(model_mode, ModelMode)
    every = model_columns(schema, {})
    cols = [every[0], *(c for c in every[1:] if c.field in fields)]
    if missing := set(fields) - {c.field for c in cols[1:]}:
        raise ValueError(f"the model has no column for {', '.join(sorted(missing))}")

    rows = generate_rows(n_rows, seed)
    canary = generate_rows(1, seed + 1)[0]
    if person:  # D's people within the bound (D's counts fixed), the canary over it
        id_field, seen, kept_rows = schema.id_field, Counter[Any](), []
        for r in rows:
            seen[r[id_field]] += 1
            if seen[r[id_field]] <= max_contributions:
                kept_rows.append(r)
        rows = kept_rows
        canaries = [{**canary, id_field: "canary-person"}] * (max_contributions
                                                             + MODEL_CANARY_EXTRA_ROWS)
        priv_unit = PrivacyUnit(UNIT_COL, max_contributions)
    else:
        canaries, priv_unit = [canary], PrivacyUnit()
    frames = [derive_frame(data, schema, counts, schema.id_field if person else None)
              .collect().lazy() for data in (rows, [*rows, *canaries])]
    # what the truncation keeps of the canary (identical rows): the exact counts' D'
    kept_canary = canaries[:max_contributions] if person else canaries

    eps_cal = float(calibrate_to if calibrate_to is not None else epsilon)
    (rho_cal,) = zcdp_budget(eps_cal, delta, [1.0])  # as release_model: counts (eps, delta)
    slot = rho_cal / scale_factor ** 2
    common = {"unit": unit, "rows_in_D": len(rows), "canary_rows": len(canaries),
              "max_contributions": max_contributions if person else None,
              "columns": [c.name for c in cols], "calibrated_to_epsilon": eps_cal,
              "scale_factor": scale_factor, "delta": delta,
              **conversion_check(epsilon, delta)}
    release_algorithm = model_mode.algorithm(cols, counts, None)
    if not isinstance(release_algorithm, CalibratedFixed):
        return _adaptive(model_mode, counts, cols, frames, priv_unit, slot, epsilon, common)
    keeper = _KeptFixed(queries=release_algorithm.queries, estimator=_no_fit)
    # the release's table query with the kept algorithm
    ctx = new_context(frames[0], priv_unit, [slot], measure="rho")
    query = table_query(ctx, priv_unit, cols, keeper)
    table = query(frames[0])  # one release on D: CalibratedFixed builds the marginals
    (kept,) = keeper.kept
    marginals, d_in = kept["measurement"], kept["d_in"]
    rho_opendp = float(marginals.map(d_in))
    if rho_opendp > slot * (1 + 1e-9):
        raise RuntimeError("OpenDP's map of the marginals exceeds their slot")

    from release.dp.compat import mbi_helpers

    mbi = mbi_helpers()
    cliques = [q.by for q in keeper.queries]
    exact = mbi.make_stable_marginals(kept["input_domain"], kept["input_metric"],
                                      mbi.get_associated_metric(kept["output_measure"]),
                                      cliques)
    sensitivity = {c: float(v) for c, v in exact.map(d_in).items()}
    true_d, true_dp = (exact(derive_frame(data, schema, counts,
                                          schema.id_field if person else None)
                             .select([c.frame_col for c in cols]).collect().lazy())
                       for data in (rows, [*rows, *kept_canary]))
    shift = {c: (true_dp[c].astype(float) - true_d[c].astype(float)).ravel() for c in cliques}
    for c in cliques:
        if not math.isclose(float(np.linalg.norm(shift[c])), sensitivity[c], rel_tol=1e-9):
            raise RuntimeError(f"the canary moves marginal {c} by less than its sensitivity")
    stddev = {m.clique: float(m.stddev) for m in table.marginals.flatten()}
    mu_mechanism = math.sqrt(sum(float(np.sum(shift[c] ** 2)) / stddev[c] ** 2
                                 for c in cliques))
    weights = {c: shift[c] / stddev[c] ** 2 / mu_mechanism for c in cliques}

    def sampler(x: pl.LazyFrame) -> Sampler:
        def statistic() -> float:  # the whole query: the person unit's truncation runs
            return sum(float(np.dot(np.asarray(m.noisy_measurement, dtype=np.float64),
                                    weights[m.clique]))
                       for m in query(x).marginals.flatten())

        return lambda n: np.fromiter((statistic() for _ in range(n)), dtype=np.float64,
                                     count=n)

    names = {c.frame_col: c.name for c in cols}
    details = {
        "mode": "fixed", **common,
        "marginals": [{"clique": [names[a] for a in c], "sensitivity": sensitivity[c],
                       "stddev": stddev[c], "cells": int(shift[c].size)} for c in cliques],
        "constructor": "release.counts.model.CalibratedFixed.make_marginals (OpenDP "
        "make_stable_marginals >> then_noise_marginals, zCDP), inside the release's "
        "contingency_table query",
        "slot_rho": slot, "rho": rho_opendp, "mu": mu_mechanism,
        "opendp_mu": math.sqrt(2 * rho_opendp),
        "output": "projection of the noisy marginals on the canary's cells, weighted by "
                  "inverse variance"}
    return Neighbours(name=f"model ({unit} unit)", claimed_epsilon=epsilon,
                      run_d=sampler(frames[0]), run_dprime=sampler(frames[1]),
                      output="scalar", details=details, claimed_delta=delta,
                      claimed_mu=details["claimed_mu"])


def _quick_fit(domain: Any, loss_fn: Any, *, potentials: Any = None) -> Any:
    """AIM's model fit inside its rounds, shortened: post-processing of released marginals,
    so it changes which marginal AIM picks next, never what a round costs."""
    from mbi.estimation import mirror_descent

    return mirror_descent(domain, loss_fn, potentials=potentials, iters=MODEL_QUICK_FIT_ITERS)


def _adaptive(model_mode: ModelMode, counts: CountsConfig, cols: list[Any],
              frames: list[pl.LazyFrame], priv_unit: PrivacyUnit, slot: float, epsilon: float,
              common: dict[str, Any]) -> Neighbours:
    """AIM or MST as the release runs it (its algorithm, the slot a hair under the budget
    that `release.counts.model.working_slot` finds), the whole adaptive release per run.
    The output is every released noisy marginal, centred on D's true counts, projected on
    the canary's cells and weighted by the inverse variance of its own (released) stddev:
    whichever marginals a run selects, the output has mean 0 on D and is shifted on D' by
    the measured part's squared mu, so the standardised shift estimates that mu, which the
    claim (sqrt(2 rho) of the whole budget, selections included) bounds."""
    from opendp.mod import OpenDPException
    mode = counts.mode
    alg = dataclasses.replace(model_mode.algorithm(cols, counts, None), estimator=_quick_fit)
    slot = working_slot(frames[0], priv_unit, cols, alg, slot)
    ctx = new_context(frames[0], priv_unit, [slot], measure="rho")
    query = table_query(ctx, priv_unit, cols, alg)
    rho_opendp = float(query.map(ctx.d_in))
    if rho_opendp > slot * (1 + 1e-9):
        raise RuntimeError("OpenDP's map of the table exceeds its slot")
    frame_cols = [c.frame_col for c in cols]
    inputs = [f.select(frame_cols).collect().lazy() for f in frames]
    cells = {c.frame_col: len(c.keys) + 1 for c in cols}  # OpenDP's null cell last
    codes = [{a: x.collect()[a].to_numpy() for a in frame_cols} for x in inputs]
    exact: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}

    def on_d_and_shift(clique: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The clique's true counts on D and D' minus D (the canary's rows), row-major."""
        if clique not in exact:
            shape = tuple(cells[a] for a in clique)
            d, dp_ = (np.bincount(np.ravel_multi_index([c[a] for a in clique], shape),
                                  minlength=math.prod(shape)).astype(np.float64)
                      for c in codes)
            exact[clique] = d, dp_ - d
        return exact[clique]

    def term(m: Any) -> float:
        """One released marginal's noise, centred on D's counts, along the canary's shift,
        over its variance: mean 0 on D whichever marginal a run selected."""
        on_d, shift = on_d_and_shift(tuple(m.clique))
        noisy = np.asarray(m.noisy_measurement, dtype=np.float64)
        return float(np.dot(noisy - on_d, shift)) / float(m.stddev) ** 2

    details = {"mode": mode, **common, "aim_rounds": counts.aim_rounds
               if mode == "aim" else None, "fit_iterations": MODEL_QUICK_FIT_ITERS,
               "constructor": f"opendp.extras.mbi.{model_mode.opendp_name} as the release "
               "builds it (release.counts.model.ModelMode.algorithm), inside the release's "
               "contingency_table query",
               "slot_rho": slot, "rho": rho_opendp, "opendp_mu": math.sqrt(2 * rho_opendp),
               "runs_refused_by_opendp": 0,  # OpenDP refused mid-way; rerun
               "output": "every released noisy marginal projected on the canary's cells, "
                         "weighted by inverse variance"}

    def sampler(x: pl.LazyFrame) -> Sampler:
        def statistic() -> float:
            for _ in range(ADAPTIVE_RETRIES):
                try:
                    table = query(x)
                    break
                except OpenDPException as e:  # opendp #2789 on a data-dependent path:
                    if "insufficient budget" not in str(e):  # the release refuses it too
                        raise
                    details["runs_refused_by_opendp"] += 1
            else:
                raise RuntimeError(f"OpenDP's {mode} overran its budget in "
                                   f"{ADAPTIVE_RETRIES} runs in a row")
            return sum(term(m) for m in table.marginals.flatten())

        return lambda n: np.fromiter((statistic() for _ in range(n)), dtype=np.float64,
                                     count=n)

    return Neighbours(name=f"model {mode} ({common['unit']} unit)", claimed_epsilon=epsilon,
                      run_d=sampler(frames[0]), run_dprime=sampler(frames[1]),
                      output="scalar", details=details, claimed_delta=common["delta"],
                      claimed_mu=common["claimed_mu"])


# ----- console -----------------------------------------------------------------------------

def render(report: dict[str, Any], console: Console) -> None:
    confidence = {r.get("confidence", CONFIDENCE) for r in report["result"]["audits"]}
    t = Table(title=f"mechanism audit ({', '.join(f'{100 * c:g}' for c in sorted(confidence))}"
                    " % Clopper-Pearson)")
    for col in ("mechanism", "claimed eps", "delta", "runs", "FPR [CI]", "FNR [CI]", "eps_LB",
                "verdict"):
        t.add_column(col)
    for r in report["result"]["audits"]:
        verdict = "[green]pass[/]" if r["passed"] else "[bold red]FAIL[/]"
        t.add_row(r["mechanism"], f"{r['claimed_epsilon']:g}", f"{r['delta']:g}",
                  str(r["runs_per_dataset"]),
                  f"{r['fpr']:.3f} [{r['fpr_ci'][0]:.3f}, {r['fpr_ci'][1]:.3f}]",
                  f"{r['fnr']:.3f} [{r['fnr_ci'][0]:.3f}, {r['fnr_ci'][1]:.3f}]",
                  f"{r['eps_lb']:.3f}", verdict)
    console.print(t)
    for r in report["result"]["audits"]:
        cal = r["calibration_runs_per_dataset"]
        chosen = f"chosen on {cal} calibration runs per dataset" if cal else \
            "fixed by the audit's design"
        console.print(f"{r['mechanism']}: {r['test']} ({chosen}; {r['seconds']:.1f} s)")
        if "mu" in r:
            m = r["mu"]
            console.print(f"  mu {m['mu_estimate']:.3f} [{m['mu_ci'][0]:.3f}, "
                          f"{m['mu_ci'][1]:.3f}] ({100 * m['confidence']:g} %) vs claimed "
                          f"{m['claimed_mu']:.3f}: "
                          + ("pass" if m["passed"] else "FAIL"))
        if "noise_check" in r:
            n = r["noise_check"]
            console.print(f"  counts' epsilon from the noise {n['epsilon_estimate']:.3f} "
                          f"(lower {n['epsilon_lower']:.3f}) vs claimed "
                          f"{n['claimed_counts_epsilon']:g}: "
                          + ("pass" if n["passed"] else "FAIL"))
