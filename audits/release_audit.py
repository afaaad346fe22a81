"""End-to-end audit of the composed release: the whole `run_release` on D and D + a canary.

The mechanism audits (`audits.mechanism`) check one OpenDP mechanism each; this one checks
what they are composed into - the config, the privacy unit, the count plan, the selpe
round (pool mode, numeric kernel channel: no LLM, no embedder) and the artifact - as a
black box. D is a small fictional table on a tiny public schema (one numeric field, three
classes); the canary is one person with several rows in several classes, far from D's rows.
Each run is a full signed release into a scratch folder; only the artifact is read back.

Two checks, either one flags:

- distinguishing test (as in the mechanism audits): on calibration runs a Neyman-Pearson
  score is fitted to the artifact (per released count, the Laplace log-likelihood ratio
  with centers and spread estimated on those runs; per class, the winner's frequency
  ratio), a threshold is chosen, and on fresh runs eps_LB (95 % Clopper-Pearson) must not
  exceed the claim: epsilon for a person unit whose rows are bounded to the canary's row
  count, rows x epsilon for a row unit (group privacy);
- noise check: from the spread of every released count over the D runs, the discrete
  Laplace scale of each count query and with it epsilon_q = sensitivity / scale (rows: 1,
  persons: max_contributions), summed over the queries with a 99.9 % lower confidence end;
  it must not exceed the counts' claimed share. A composed pure-DP release spreads the
  canary's loss over many outputs, so the test alone cannot see a factor 2 at CI sizes;
  the spread can, in every run measured.

Inputs are fictional and seeded (the data's choice only; DP noise never is).
"""

from __future__ import annotations

import io
import json
import math
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rich.console import Console
from scipy.stats import norm

from audits.mechanism import choose_test, eps_lb_of, error_counts
from audits.stats import CONFIDENCE
from release.config import load_config
from release.pipeline import run_release
from selpe_audit.artifact.signing import generate_keypair

CLASSES = (0, 1, 2)
X_MAX = 100
#: the noise check's two-sided interval: a correct release is flagged by chance ~1 in 2000
NOISE_CONFIDENCE = 0.999
DEFAULT_RUNS = 150
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "release_audit", "description": "Fictional records for the release audit.",
    "type": "object", "x-label": "cls", "x-id": "person",
    "properties": {
        "person": {"type": "string", "maxLength": 16, "description": "fictional person id"},
        "x": {"type": "integer", "minimum": 0, "maximum": X_MAX, "description": "a value",
              "x-bins": [0, 50, X_MAX]},
        "cls": {"type": "integer", "enum": list(CLASSES), "description": "class"},
    },
    "required": ["person", "x", "cls"], "additionalProperties": False,
}


@dataclass(frozen=True)
class ReleaseAudit:
    """One configuration of the audited release (claimed epsilon, unit, sizes)."""

    epsilon: float = 1.0
    unit: str = "person"
    canary_rows: int = 2
    rows: int = 12
    counts_share: float = 0.5
    calibrate_to: float | None = None  # run the release at this epsilon (a self-check)

    @property
    def claimed(self) -> float:
        """The guarantee for the canary: epsilon per person, rows x epsilon per row unit."""
        return self.epsilon * (1 if self.unit == "person" else self.canary_rows)

    @property
    def sensitivity(self) -> int:
        """Rows one privacy unit may change in a count (OpenDP's truncation bound)."""
        return self.canary_rows if self.unit == "person" else 1


def datasets(a: ReleaseAudit, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """D (class 0 is empty, so the canary's home class is decided by it alone: the worst
    case for the selection) and D' = D + the canary person (x at the public maximum)."""
    rng = np.random.default_rng(seed)  # the fictional data only, never DP noise
    rows = [{"person": f"p{i}", "x": int(rng.integers(0, 40)), "cls": int(CLASSES[1 + i % 2])}
            for i in range(a.rows)]
    canary = [{"person": "canary", "x": X_MAX, "cls": CLASSES[j % len(CLASSES)]}
              for j in range(a.canary_rows)]
    return rows, [*rows, *canary]


class _Runner:
    """Full releases of one dataset into a scratch folder; returns the documents."""

    def __init__(self, a: ReleaseAudit, work: Path, rows: list[dict], tag: str) -> None:
        self.work, self.tag, self.count = work, tag, 0
        data = work / f"{tag}.csv"
        pl.DataFrame(rows).write_csv(data)
        self.overrides: dict[str, Any] = {
            "dataset": f"release-audit-{tag}", "data": data, "schema": work / "schema.json",
            "release_key": work / "key.pem", "enclave_log": work / "enclave.log",
            "candidates": work / "pool.jsonl", "epsilon": a.calibrate_to or a.epsilon,
            "counts_share": a.counts_share, "selection_share": 1 - a.counts_share,
            "unit": a.unit, "id_field": "person" if a.unit == "person" else None,
            "max_contributions": a.sensitivity if a.unit == "person" else None,
            "rounds": 1, "k": 4, "batches": 1, "q": 1, "channels": "numeric",
            "lifetime_epsilon": 1e9, "n_min": 0,
            "counts_mode": "marginals"}  # the Laplace composition this audit models

    def __call__(self, n: int) -> list[dict[str, Any]]:
        docs = []
        for _ in range(n):
            self.count += 1
            out = self.work / "out" / f"{self.tag}-{self.count}"
            ledger = self.work / "ledger" / f"{self.tag}-{self.count}"
            cfg = load_config(None, {**self.overrides, "out": out, "lifetime_ledger": ledger})
            docs.append(run_release(cfg, Console(file=io.StringIO())).doc)
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ledger, ignore_errors=True)
        return docs


def _prepare(work: Path) -> None:
    (work / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    generate_keypair(work / "key.pem")
    # public candidates: per class, two near the canary and two near D's rows
    pool = [{"x": x, "cls": c} for c in CLASSES for x in (X_MAX, X_MAX - 5, 10, 20)]
    (work / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pool))


# ----- what is read back from an artifact ---------------------------------------------------

def released_counts(doc: dict[str, Any]) -> dict[str, list[int]]:
    """Every released noisy count, per count query (mechanism id), in a fixed order."""
    c = doc["counts"]
    out = {c["class_balance"]["mechanism_id"]: list(c["class_balance"]["dp_counts"])}
    for h in c["histograms"].values():
        out[h["mechanism_id"]] = [v for row in h["dp_counts_by_class"] for v in row]
    return out


def winners(doc: dict[str, Any]) -> dict[Any, str]:
    """Round 1's winners per class, as canonical text (categorical outputs)."""
    rnd = doc["selection"]["rounds"][0]
    return {str(c["class"]): json.dumps(c["winners"], sort_keys=True) for c in rnd["classes"]}


@dataclass(frozen=True)
class Score:
    """The Neyman-Pearson score fitted on calibration runs (fixed before the fresh runs)."""

    centers: dict[str, np.ndarray]
    shifts: dict[str, np.ndarray]
    scales: dict[str, float]
    winner_llr: dict[str, dict[str, float]]

    def __call__(self, doc: dict[str, Any]) -> float:
        s = 0.0
        for q, y in released_counts(doc).items():
            d = self.shifts[q]
            z = np.clip(np.asarray(y, dtype=float) - self.centers[q], -np.abs(d) / 2,
                        np.abs(d) / 2)
            s += float(np.sum(2 * z * np.sign(d))) / self.scales[q]
        for c, w in winners(doc).items():
            s += self.winner_llr[c].get(w, 0.0)
        return s


def fit_score(docs_d: list[dict], docs_dp: list[dict]) -> Score:
    counts_d = [released_counts(d) for d in docs_d]
    counts_dp = [released_counts(d) for d in docs_dp]
    centers, shifts, scales = {}, {}, {}
    for q in counts_d[0]:
        yd = np.array([c[q] for c in counts_d], dtype=float)
        ydp = np.array([c[q] for c in counts_dp], dtype=float)
        md, mdp = np.median(yd, axis=0), np.median(ydp, axis=0)
        centers[q], shifts[q] = (md + mdp) / 2, mdp - md
        scales[q] = max(float(np.mean(np.abs(yd - md))), 1e-9)
    llr: dict[str, dict[str, float]] = {}
    wd, wdp = [winners(d) for d in docs_d], [winners(d) for d in docs_dp]
    for c in wd[0]:
        nd, ndp = Counter(w[c] for w in wd), Counter(w[c] for w in wdp)
        llr[c] = {w: math.log((ndp[w] + 0.5) / (nd[w] + 0.5)) for w in {*nd, *ndp}}
    return Score(centers, shifts, scales, llr)


# ----- the noise check ----------------------------------------------------------------------

def _discrete_laplace_scale(var: float) -> float:
    """The scale b whose discrete Laplace has variance ``var`` (2 p / (1 - p)^2, p = e^-1/b)."""
    if var <= 0:
        return 0.0
    # 2p / (1-p)^2 = v  <=>  v p^2 - (2v + 2) p + v = 0, the root in (0, 1)
    p = ((var + 1) - math.sqrt(2 * var + 1)) / var
    return -1.0 / math.log(p)


def noise_check(docs_d: list[dict], sensitivity: int,
                confidence: float = NOISE_CONFIDENCE) -> dict[str, Any]:
    """Per count query: epsilon_q = sensitivity / scale from the released counts' spread
    over runs on D, with a two-sided ``confidence`` interval (Laplace kurtosis: SE of the
    variance = var sqrt(5 / n))."""
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    per_query = {}
    low = mid = 0.0
    counts = [released_counts(d) for d in docs_d]
    for q in counts[0]:
        y = np.array([c[q] for c in counts], dtype=float)
        resid = y - y.mean(axis=0)
        n = resid.size - resid.shape[1]  # degrees of freedom after the per-cell means
        var = float(np.sum(resid ** 2) / n)
        var_hi = var * (1 + z * math.sqrt(5 / n))
        eps_q = sensitivity / _discrete_laplace_scale(var)
        eps_lo = sensitivity / _discrete_laplace_scale(var_hi)
        per_query[q] = {"epsilon_estimate": eps_q, "epsilon_lower": eps_lo, "samples": n}
        low, mid = low + eps_lo, mid + eps_q
    return {"queries": per_query, "epsilon_estimate": mid, "epsilon_lower": low,
            "confidence": confidence}


# ----- the audit ----------------------------------------------------------------------------

def audit_release(a: ReleaseAudit, runs: int = DEFAULT_RUNS,
                  calibration_runs: int | None = None, seed: int = 0,
                  confidence: float = CONFIDENCE,
                  noise_confidence: float = NOISE_CONFIDENCE) -> dict[str, Any]:
    """Calibrate the score and the test, then measure on fresh runs; see the module. A
    correct release FAILs by chance with probability at most about 1 - ``confidence``
    (eps_LB) plus (1 - ``noise_confidence``) / 2 (the noise check)."""
    t0 = time.perf_counter()
    cal = calibration_runs or runs
    d, dp_ = datasets(a, seed)
    with tempfile.TemporaryDirectory(prefix="selpe-release-audit-") as tmp:
        work = Path(tmp)
        _prepare(work)
        run_d, run_dp = _Runner(a, work, d, "D"), _Runner(a, work, dp_, "Dprime")
        cal_d, cal_dp = run_d(cal), run_dp(cal)
        score = fit_score(cal_d, cal_dp)
        test = choose_test(np.array([score(x) for x in cal_d]),
                           np.array([score(x) for x in cal_dp]), "scalar")
        fresh_d, fresh_dp = run_d(runs), run_dp(runs)
    y_d = np.array([score(x) for x in fresh_d])
    y_dp = np.array([score(x) for x in fresh_dp])
    fp, fn = error_counts(test, y_d, y_dp)
    res = eps_lb_of(fp, runs, fn, runs, confidence=confidence)
    claimed_counts = a.epsilon * a.counts_share
    noise = noise_check(cal_d + fresh_d, a.sensitivity, noise_confidence)
    noise["claimed_counts_epsilon"] = claimed_counts
    noise["passed"] = noise["epsilon_lower"] <= claimed_counts * (1 + 1e-9)
    ledger = fresh_d[0]["ledger"]
    return {
        "mechanism": f"release ({a.unit} unit)",
        "claimed_epsilon": a.claimed,
        "delta": 0.0,
        "runs_per_dataset": runs,
        "calibration_runs_per_dataset": cal,
        "test": test.describe().replace("noisy statistic", "artifact's likelihood-ratio score"),
        **res,
        "noise_check": noise,
        "passed": res["eps_lb"] <= a.claimed and noise["passed"],
        "seconds": time.perf_counter() - t0,
        "details": {
            "unit": a.unit, "release_epsilon": a.epsilon,
            "calibrated_to_epsilon": a.calibrate_to or a.epsilon,
            "artifact_total_epsilon": ledger["total_epsilon"],
            "canary": f"one person, {a.canary_rows} rows in {min(a.canary_rows, 3)} classes",
            "rows_in_D": a.rows, "counts_share": a.counts_share,
            "selection": "selpe, 1 round, pool mode, numeric kernel channel, b = 1",
            "claim": "epsilon (person unit, rows bounded to the canary's)" if a.unit == "person"
                     else "rows x epsilon (row unit: group privacy)",
        },
    }
