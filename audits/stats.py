"""Small statistics shared by the audits: exact binomial intervals, ROC, empirical epsilon.

Everything here is plain math on numbers the audits computed; no data is read or written.
Intervals are exact (Clopper-Pearson) so that a claim like "the mechanism leaks at least
eps_LB" holds with the stated confidence however few runs there were.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import brentq, minimize_scalar
from scipy.stats import beta, rankdata
from scipy.stats import t as student_t
from sklearn.metrics import roc_curve

CONFIDENCE = 0.95
#: mu's two-sided interval: a correct Gaussian is flagged by chance 1 time in 200
MU_CONFIDENCE = 0.99


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Two-sided exact interval for a binomial proportion k / n (each tail (1 - c) / 2)."""
    if n <= 0:
        raise ValueError("clopper_pearson needs n >= 1 trials")
    if not 0 <= k <= n:
        raise ValueError("clopper_pearson needs 0 <= k <= n")
    a = 1.0 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """ROC AUC of scores where higher means 'positive' (ties count one half): the
    Mann-Whitney statistic from average ranks, scikit-learn's roc_auc_score to the last bit
    or one ulp, at a tenth of its cost (its input checks were most of a bootstrap)."""
    if not len(pos) or not len(neg):
        raise ValueError("an AUC needs scores of both classes")
    ranks = rankdata(np.r_[pos, neg])
    n_pos, n_neg = len(pos), len(neg)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auc_bootstrap_ci(pos: np.ndarray, neg: np.ndarray, seed: int, reps: int = 1000,
                     confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUC, resampling each class separately.

    Seeded: this is resampling of audit statistics, not DP noise.
    """
    rng = np.random.default_rng(seed)
    vals = np.empty(reps)
    for i in range(reps):
        p = pos[rng.integers(0, len(pos), len(pos))]
        n = neg[rng.integers(0, len(neg), len(neg))]
        vals[i] = auc(p, n)
    a = (1.0 - confidence) / 2
    return float(np.quantile(vals, a)), float(np.quantile(vals, 1 - a))


def max_advantage(pos: np.ndarray, neg: np.ndarray) -> float:
    """max over thresholds of TPR - FPR (the empirical membership advantage)."""
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    fpr, tpr, _ = roc_curve(y, np.r_[pos, neg])
    return float(np.max(tpr - fpr))


def roc_points(pos: np.ndarray, neg: np.ndarray, max_points: int = 200) -> dict[str, list]:
    """The ROC curve (higher score = positive) thinned to at most ``max_points`` points,
    spaced geometrically along the curve so that the low-FPR end, where membership
    inference matters, keeps its detail."""
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    fpr, tpr, _ = roc_curve(y, np.r_[pos, neg])
    if len(fpr) > max_points:
        idx = np.unique(np.r_[0, np.geomspace(1, len(fpr), max_points).astype(int) - 1])
        fpr, tpr = fpr[idx], tpr[idx]
    return {"fpr": [float(x) for x in fpr], "tpr": [float(x) for x in tpr]}


@dataclass(frozen=True)
class TprAtFpr:
    """TPR of the test 'score > threshold', the threshold set on the negatives so that at
    most floor(target * n_neg) of them pass. ``None`` fields: too few negatives."""

    target_fpr: float
    n_pos: int
    n_neg: int
    threshold: float | None
    fpr: float | None
    tpr: float | None
    tpr_ci: tuple[float, float] | None
    note: str | None

    def to_json(self) -> dict:
        return {"target_fpr": self.target_fpr, "threshold": self.threshold,
                "empirical_fpr": self.fpr, "tpr": self.tpr,
                "tpr_ci95": list(self.tpr_ci) if self.tpr_ci else None, "note": self.note}


def tpr_at_fpr(pos: np.ndarray, neg: np.ndarray, target: float) -> TprAtFpr:
    """TPR at a fixed FPR with a Clopper-Pearson interval on the TPR at that threshold.

    The interval covers the binomial noise of the members only; the threshold itself is
    estimated from the non-members, which is why 1 / FPR must not exceed their number.
    """
    n_pos, n_neg = len(pos), len(neg)
    allowed = math.floor(target * n_neg + 1e-9)
    if allowed < 1:
        return TprAtFpr(target, n_pos, n_neg, None, None, None, None,
                        f"too few non-members for FPR {target:g} to mean anything "
                        f"(1/FPR = {1 / target:g} > {n_neg} non-members)")
    threshold = float(np.sort(neg)[::-1][allowed])
    fp = int(np.sum(neg > threshold))
    tp = int(np.sum(pos > threshold))
    return TprAtFpr(target, n_pos, n_neg, threshold, fp / n_neg, tp / n_pos,
                    clopper_pearson(tp, n_pos), None)


def eps_lower_bound(fpr_upper: float, fnr_upper: float, delta: float = 0.0) -> float:
    """Empirical epsilon implied by a test's error rates (upper confidence bounds):
    max(0, ln((1 - delta - FNR_U) / FPR_U), ln((1 - delta - FPR_U) / FNR_U))."""
    best = 0.0
    for num, den in ((1 - delta - fnr_upper, fpr_upper), (1 - delta - fpr_upper, fnr_upper)):
        if num > 0 and den > 0:
            best = max(best, math.log(num / den))
    return best


def quantiles(x: np.ndarray) -> dict[str, float]:
    """The DCR summary the MIA report shows: min, 5th percentile, median."""
    return {"min": float(np.min(x)), "p05": float(np.quantile(x, 0.05)),
            "median": float(np.median(x))}


def mu_audit(y_d: np.ndarray, y_dp: np.ndarray, claimed_mu: float,
             confidence: float = MU_CONFIDENCE) -> dict[str, Any]:
    """mu = (mean(D') - mean(D)) / sigma with its two-sided ``confidence`` interval (the
    standardised mean difference's standard error, sqrt(2 / n + mu^2 / (4 n)) for n runs per
    dataset, times Student's t quantile at 2 n - 2 degrees of freedom: sigma is estimated, so
    few runs widen the interval instead of raising the false-FAIL rate); FAIL when the lower
    end exceeds ``claimed_mu``. A correct mechanism FAILs with probability about
    (1 - confidence) / 2."""
    n = min(len(y_d), len(y_dp))
    if n < 2:
        raise ValueError("mu_audit needs at least 2 runs per dataset")
    sigma = math.sqrt((float(np.var(y_d, ddof=1)) + float(np.var(y_dp, ddof=1))) / 2)
    shift = float(np.mean(y_dp)) - float(np.mean(y_d))
    if sigma > 0:
        mu = shift / sigma
        se = math.sqrt(2 / n + mu ** 2 / (4 * n))
        q = float(student_t.ppf(1 - (1 - confidence) / 2, 2 * n - 2))
        lo, hi = mu - q * se, mu + q * se
    else:  # no noise at all: any shift is an infinite mu
        mu = lo = hi = math.inf if shift else 0.0
    return {"mu_estimate": mu, "mu_ci": [lo, hi], "confidence": confidence,
            "claimed_mu": claimed_mu, "noise_sigma_estimate": sigma, "runs_per_dataset": n,
            "passed": lo <= claimed_mu}


# ----- zCDP -> (epsilon, delta), written apart from the release's (OpenDP's) conversion ----

def zcdp_epsilon(rho: float, delta: float) -> float:
    """epsilon of rho-zCDP at ``delta`` (Canonne, Kamath, Steinke 2020, "The discrete
    Gaussian for differential privacy", section 2.3: the inf over alpha > 1 of
    alpha rho + (ln(1 / delta) + (alpha - 1) ln(1 - 1 / alpha) - ln alpha) / (alpha - 1)),
    minimised numerically here: a log grid over alpha - 1, then a bounded scalar search.
    The audits' claims use it so that an error in the release's conversion shows."""
    if not (rho >= 0 and 0 < delta < 1):
        raise ValueError("zcdp_epsilon needs rho >= 0 and 0 < delta < 1")
    if rho == 0:
        return 0.0
    log_inv_delta = -math.log(delta)

    def eps_at(t: Any) -> Any:  # t = alpha - 1 > 0
        t = np.asarray(t, dtype=np.float64)
        return (1 + t) * rho + (log_inv_delta + t * (np.log(t) - np.log1p(t))
                                - np.log1p(t)) / t

    grid = np.logspace(-9, 9, 2001)
    values = eps_at(grid)
    i = int(np.argmin(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    best = minimize_scalar(lambda t: float(eps_at(t)), bounds=(lo, hi), method="bounded",
                           options={"xatol": lo * 1e-10})
    return max(0.0, min(float(best.fun), float(values[i])))


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The rho whose `zcdp_epsilon` at ``delta`` is ``epsilon`` (a root search: epsilon
    grows with rho)."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("zcdp_rho needs epsilon > 0 and 0 < delta < 1")
    hi = epsilon  # usually enough (epsilon >= rho for small delta); doubled if not
    while zcdp_epsilon(hi, delta) < epsilon:
        hi *= 2
    return float(brentq(lambda r: zcdp_epsilon(r, delta) - epsilon, 1e-300, hi,
                        xtol=1e-300, rtol=1e-13))
