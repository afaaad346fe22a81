"""The audit's frame: neighbouring datasets (`Neighbours`), the distinguishing test, the
empirical epsilon lower bound and mu, and the console table. Each mechanism family's
module builds its `Neighbours`; `audit` runs them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
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
from release.dp.zcdp import calibrate_zcdp_budget

DEFAULT_DELTA = 1e-6  # the release's default for the Gaussian modes
#: how far (relative) the release's rho for a claimed (epsilon, delta) may exceed the audits'
#: own conversion's: OpenDP and `audits.stats.zcdp_rho` agree to ~1e-14
CONVERSION_TOLERANCE = 1e-9

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


def conversion_check(epsilon: float, delta: float) -> dict[str, Any]:
    """The claim in rho for (``epsilon``, ``delta``) from the audits' own conversion
    (`audits.stats.zcdp_rho`, CKS20), beside the release's (`calibrate_zcdp_budget`,
    OpenDP's), which sets the noise: it passes when the release's rho is at most the claim's (to
    ``CONVERSION_TOLERANCE``), so an error in the release's rho -> (epsilon, delta) step
    FAILs the audit instead of moving its claim."""
    claimed = zcdp_rho(float(epsilon), delta)
    release = calibrate_zcdp_budget(float(epsilon), delta, [1.0])[0]
    return {"claimed_rho": claimed, "claimed_mu": math.sqrt(2 * claimed),  # rho = mu^2 / 2
            "conversion": {"independent_rho": claimed, "release_rho": release,
                           "tolerance": CONVERSION_TOLERANCE,
                           "passed": release <= claimed * (1 + CONVERSION_TOLERANCE)}}


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
