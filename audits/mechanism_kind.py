"""``selpe-audit audit mechanism``: the Monte-Carlo epsilon audit of the release's
mechanisms (`audits.mechanism`) and of the whole release (`audits.release_audit`), as one
audit kind. Apart from `audits.mechanism` so that the audit's statistics stay free of the
command line."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console

from audits import mechanism, release_audit
from audits.kinds import AuditKind, common_arguments, finish, make_report, register
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema, demo_schema_path, load_schema


def _arguments(k: argparse.ArgumentParser) -> None:
    common_arguments(k, synthetic=False)
    k.add_argument("--kind", choices=[*mechanism.KINDS, "release", "all"], default="all",
                   help="one mechanism, 'model' (the noisy marginals of the model counts "
                        "modes, OpenDP contingency tables in zCDP), 'release' (the whole "
                        "composed release, end to end: full releases on D and D + a canary "
                        "person) or all of them")
    k.add_argument("--unit", choices=["row", "person", "both"], default="both",
                   help="model and release audits: the privacy unit(s) audited (default "
                        "both)")
    k.add_argument("--counts-mode", choices=mechanism.MODEL_MODES, default="fixed",
                   help="model audit: the counts mode audited (default fixed: its marginals "
                        f"measurement; {', '.join(mechanism.ADAPTIVE_MODES)}: the whole "
                        f"adaptive algorithm per run, ~3 s each, {mechanism.ADAPTIVE_RUNS} "
                        "runs by default)")
    k.add_argument("--runs", type=int, help="fresh runs per dataset (default: selection "
                   f"{mechanism.DEFAULT_RUNS['selection']}, counts "
                   f"{mechanism.DEFAULT_RUNS['counts']}, "
                   f"{' and '.join(mechanism.GAUSSIAN_KINDS)} {mechanism.GAUSSIAN_RUNS}, "
                   f"model {mechanism.DEFAULT_RUNS['model']}, model aim or mst "
                   f"{mechanism.ADAPTIVE_RUNS})")
    k.add_argument("--calibration-runs", type=int, help="runs per dataset to choose the test "
                                                        "(default half of --runs, >= 100)")
    k.add_argument("--epsilon", type=float, default=1.0, help="claimed epsilon (default 1)")
    k.add_argument("--delta", type=float, default=mechanism.DEFAULT_DELTA,
                   help="claimed delta of the Gaussian selection modes and the model counts "
                        f"(default {mechanism.DEFAULT_DELTA:g}; selection and counts are "
                        "pure)")
    k.add_argument("--calibrate-to", type=float,
                   help="calibrate the mechanism to this epsilon instead of the claim (a "
                        "self-check: a value above --epsilon must FAIL)")
    k.add_argument("--confidence", type=float,
                   help="confidence of every interval the verdicts use (default: eps_LB "
                        "0.95, mu 0.99, the release's noise check 0.999); a correct "
                        "mechanism FAILs by chance with probability about 1 - this")
    k.add_argument("--candidates", type=int, default=mechanism.DEFAULT_CANDIDATES,
                   help=f"selection candidates (default {mechanism.DEFAULT_CANDIDATES})")
    k.add_argument("--field", default=mechanism.COUNTS_FIELD,
                   help=f"histogram audited by the counts audit (default {mechanism.COUNTS_FIELD})")


def _check(args: argparse.Namespace) -> None:
    """One line for each setting the audit cannot run with."""
    if not args.epsilon > 0:
        raise UserError("--epsilon must be > 0")
    if args.calibrate_to is not None and not args.calibrate_to > 0:
        raise UserError("--calibrate-to must be > 0")
    if args.runs is not None and args.runs < 10:
        raise UserError("--runs must be at least 10")
    if args.candidates < 2:
        raise UserError("--candidates must be at least 2")
    if args.confidence is not None and not 0.5 < args.confidence < 1:
        raise UserError("--confidence must be in (0.5, 1)")
    if not 0 < args.delta < 1:
        raise UserError("--delta must be in (0, 1)")


def _release_audits(args: argparse.Namespace, console: Console) -> list[dict]:
    """The whole composed release, per privacy unit."""
    c = args.confidence  # every interval of the verdicts, if given
    strict = {} if c is None else {"confidence": c, "noise_confidence": c}
    out = []
    for unit in ("row", "person") if args.unit == "both" else (args.unit,):
        runs = args.runs or release_audit.DEFAULT_RUNS
        a = release_audit.ReleaseAudit(epsilon=args.epsilon, unit=unit,
                                       calibrate_to=args.calibrate_to)
        with console.status(f"release ({unit} unit): {runs} full releases per dataset"):
            out.append(release_audit.audit_release(a, runs, args.calibration_runs, **strict))
    return out


def _neighbours(args: argparse.Namespace, kind: str, schema: Schema) -> list:
    """The neighbouring datasets of one mechanism kind (the model's per privacy unit)."""
    if kind == "model":
        return [mechanism.model_neighbours(schema, args.epsilon, args.delta, unit,
                                           args.calibrate_to, mode=args.counts_mode)
                for unit in (mechanism.MODEL_UNITS if args.unit == "both" else (args.unit,))]
    if kind == "selection":
        return [mechanism.selection_neighbours(args.epsilon, args.calibrate_to,
                                               args.candidates)]
    if kind in mechanism.GAUSSIAN_KINDS:
        return [mechanism.gaussian_neighbours(schema, kind, args.epsilon, args.delta,
                                              args.calibrate_to)]
    if kind in ("phrases", "keywords"):
        return [mechanism.phrase_neighbours(args.epsilon, args.delta, args.calibrate_to,
                                            kind=kind)]
    if args.field not in schema.field_names:
        raise UserError(f"--field: the demo schema has no field '{args.field}'")
    try:
        return [mechanism.counts_neighbours(schema, args.epsilon, args.field,
                                            calibrate_to=args.calibrate_to)]
    except ValueError as e:
        raise UserError(f"--field: {e}") from None


def _mechanism_audits(args: argparse.Namespace, kind: str, schema: Schema,
                      console: Console) -> list[dict]:
    """One mechanism kind's audits, ``--runs`` fresh runs per dataset (or its default)."""
    c = args.confidence
    strict = {} if c is None else {"confidence": c, "mu_confidence": c}
    runs = args.runs or mechanism.DEFAULT_RUNS[kind]
    if kind == "model" and args.counts_mode in mechanism.ADAPTIVE_MODES:
        runs = args.runs or mechanism.ADAPTIVE_RUNS
    out = []
    for nb in _neighbours(args, kind, schema):
        label = nb.name if kind == "model" else kind
        with console.status(f"{label}: {runs} runs per dataset"):
            out.append(mechanism.audit(nb, runs, args.calibration_runs, **strict))
    return out


def audit_mechanism(kind: str = "all", *, unit: str = "both",  # noqa: PLR0913 (the flags)
                    counts_mode: str = "fixed",
                    runs: int | None = None, calibration_runs: int | None = None,
                    epsilon: float = 1.0, delta: float = mechanism.DEFAULT_DELTA,
                    calibrate_to: float | None = None, confidence: float | None = None,
                    candidates: int = mechanism.DEFAULT_CANDIDATES,
                    field: str = mechanism.COUNTS_FIELD, progress: bool = True
                    ) -> dict[str, Any]:
    """Monte-Carlo epsilon audits of the release's mechanisms on fictional demo rows, as
    ``selpe-audit audit mechanism`` (the same names as its flags).

    Returns
    -------
    dict
        The report: ``result["audits"]`` (one verdict per mechanism and unit, with its
        eps_LB, intervals and details), ``result["passed"]`` and ``result["failed"]``.
    """
    args = argparse.Namespace(kind=kind, unit=unit, counts_mode=counts_mode, runs=runs,
                              calibration_runs=calibration_runs, epsilon=epsilon, delta=delta,
                              calibrate_to=calibrate_to, confidence=confidence,
                              candidates=candidates, field=field)
    choices = (*mechanism.KINDS, "release", "all")
    if kind not in choices:
        raise UserError(f"--kind must be one of {', '.join(choices)}")
    if unit not in ("row", "person", "both"):
        raise UserError("--unit must be row, person or both")
    if counts_mode not in mechanism.MODEL_MODES:
        raise UserError(f"--counts-mode must be one of {', '.join(mechanism.MODEL_MODES)}")
    t0 = time.perf_counter()
    _check(args)
    schema = load_schema(demo_schema_path())  # public, fictional: mechanisms are data-blind
    kinds = (*mechanism.KINDS, "release") if kind == "all" else (kind,)
    console = Console(stderr=True, highlight=False, quiet=not progress)
    audits = []
    for k in kinds:
        audits += (_release_audits(args, console) if k == "release"
                   else _mechanism_audits(args, k, schema, console))
    config = {"kinds": list(kinds), "epsilon": epsilon, "delta": delta, "unit": unit,
              "calibrate_to": calibrate_to, "candidates": candidates, "field": field,
              "runs": runs, "calibration_runs": calibration_runs, "confidence": confidence,
              "data": "fictional demo rows (selpe_audit.demo.generator), demo schema"}
    failed = [a["mechanism"] for a in audits if not a["passed"]]
    result = {"audits": audits, "passed": not failed, "failed": failed}
    return make_report("mechanism", {}, config, result, t0)


def _run(args: argparse.Namespace) -> int:
    report = audit_mechanism(
        args.kind, unit=args.unit, counts_mode=args.counts_mode, runs=args.runs,
        calibration_runs=args.calibration_runs, epsilon=args.epsilon, delta=args.delta,
        calibrate_to=args.calibrate_to, confidence=args.confidence,
        candidates=args.candidates, field=args.field)
    finish("mechanism", args, report, mechanism.render)
    failed = report["result"]["failed"]
    if failed:
        Console(stderr=True, highlight=False).print(
            f"[bold red]FAIL[/]: empirical epsilon above the claimed {args.epsilon:g} for "
            f"{', '.join(failed)}")
        return 1
    return 0


AUDIT = register(AuditKind("mechanism", "Monte-Carlo epsilon audit of the release mechanisms "
                           "(FAILs above the claim)", _arguments, _run, mechanism.__doc__))
