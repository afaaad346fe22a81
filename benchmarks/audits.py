"""Do the mechanism audits catch a factor-2 error? Every audit, calibrated right and 2x off.

    python -m benchmarks --only audits [--quick]

For each audited mechanism (selpe's round through the release's selection loop, counts,
the two Gaussian selection modes, the model counts modes' noisy marginals and the whole
release in its default configuration, each of the last two for row and person units) the
audit runs twice on the release's own OpenDP mechanisms: calibrated
to the claimed epsilon (it must pass) and calibrated to twice the claim (a planted 2x
mis-calibration: it must be flagged). Reports the empirical epsilon lower bound, the mu
estimate for the Gaussian modes and the model marginals, the end-to-end noise check, and
whether each verdict is the right one. One run each: the audits are themselves statistics
with confidence intervals, so read a single wrong verdict as a rerun, not a bug.
"""

from __future__ import annotations

import time
from typing import Any

from audits import mechanism, release_audit
from benchmarks.suite import Benchmark, Result, fmt, markdown_table
from selpe_audit.schema import demo_schema_path, load_schema

EPSILON = 1.0


def _one(kind: str, calibrate_to: float | None, quick: bool) -> dict[str, Any]:
    schema = load_schema(demo_schema_path())
    if kind.startswith("release"):
        unit = kind.split(":")[1]
        runs = 10 if quick else 20  # ~1 s a release; the noise check needs few
        return release_audit.audit_release(
            release_audit.ReleaseAudit(epsilon=EPSILON, unit=unit, calibrate_to=calibrate_to),
            runs, runs)
    if kind.startswith("model"):
        # at epsilon 1 (mu 0.22) the 2x error (mu 0.42) needs ~900 pooled runs to be caught
        runs = 600 if quick else mechanism.DEFAULT_RUNS["model"]
        nb = mechanism.model_neighbours(schema, EPSILON, unit=kind.split(":")[1],
                                        calibrate_to=calibrate_to)
        return mechanism.audit(nb, runs)
    # selection: a 2x calibration needs ~2000 runs at epsilon 1 (a few ms each)
    runs = 300 if quick and kind != "selection" else mechanism.DEFAULT_RUNS[kind]
    if kind == "selection":
        nb = mechanism.selection_neighbours(EPSILON, calibrate_to=calibrate_to)
    elif kind in mechanism.GAUSSIAN_KINDS:
        nb = mechanism.gaussian_neighbours(schema, kind, EPSILON, calibrate_to=calibrate_to)
    else:
        nb = mechanism.counts_neighbours(schema, EPSILON, calibrate_to=calibrate_to)
    return mechanism.audit(nb, runs)


def run(quick: bool = False) -> dict[str, Any]:
    kinds = ["selection", "counts", *mechanism.GAUSSIAN_KINDS, "model:row", "model:person",
             "release:row", "release:person"]
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        for label, cal in (("right", None), ("2x", 2 * EPSILON)):
            t0 = time.perf_counter()
            r = _one(kind, cal, quick)
            mu = r.get("mu") or {}
            noise = r.get("noise_check") or {}
            rows.append({
                "audit": kind, "calibration": label, "claimed_epsilon": r["claimed_epsilon"],
                "eps_lb": r["eps_lb"], "mu_estimate": mu.get("mu_estimate"),
                "mu_claimed": mu.get("claimed_mu"),
                "counts_epsilon_lower": noise.get("epsilon_lower"),
                "passed": r["passed"], "verdict_right": r["passed"] == (label == "right"),
                "seconds": time.perf_counter() - t0})
            print(f"{kind} {label}: passed={r['passed']} eps_lb={r['eps_lb']:.3f}", flush=True)

    def f(x: Any) -> str:
        return "" if x is None else f"{x:.3f}"

    lines = ["| audit | calibration | claimed eps | eps lower bound | mu estimate (claim) | "
             "counts eps lower (end to end) | verdict | right? |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mu = f"{f(r['mu_estimate'])} ({f(r['mu_claimed'])})" if r["mu_estimate"] else ""
        lines.append(f"| {r['audit']} | {r['calibration']} | {r['claimed_epsilon']:g} | "
                     f"{f(r['eps_lb'])} | {mu} | {f(r['counts_epsilon_lower'])} | "
                     f"{'pass' if r['passed'] else 'FLAGGED'} | "
                     f"{'yes' if r['verdict_right'] else 'NO'} |")
    table = "\n".join(lines)
    print(table)
    return {"rows": rows, "all_verdicts_right": all(r["verdict_right"] for r in rows),
            "table": table}


def _summary(r: Result) -> str:
    right = "every verdict right" if r.get("all_verdicts_right") else "SOME VERDICTS WRONG"
    return f"Each mechanism audit at the right and a 2x-off calibration: {right}."


def _table(r: Result) -> str:
    """One row per audit: its right and its 2x-off calibration side by side."""
    def cell(x: Result) -> str:
        parts = [f"eps_LB {fmt(x['eps_lb'])}"]
        if x.get("mu_estimate"):
            parts.append(f"mu {fmt(x['mu_estimate'])} ({fmt(x['mu_claimed'])})")
        if x.get("counts_epsilon_lower") is not None:
            parts.append(f"counts eps lower {fmt(x['counts_epsilon_lower'])}")
        verdict = "pass" if x["passed"] else "FLAGGED"
        return f"{', '.join(parts)}: {verdict}{'' if x['verdict_right'] else ' (WRONG)'}"
    by = {(x["audit"], x["calibration"]): x for x in r["rows"]}
    audits = list(dict.fromkeys(x["audit"] for x in r["rows"]))
    return markdown_table(("audit", "claimed eps", "right calibration", "2x-off calibration"),
                          [(a, f"{by[(a, 'right')]['claimed_epsilon']:g}",
                            cell(by[(a, "right")]), cell(by[(a, "2x")])) for a in audits])


# its own table is a row per calibration: the page pairs them
BENCHMARK = Benchmark("audits", run, table=_table, summary=_summary)
