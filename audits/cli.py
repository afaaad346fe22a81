"""``selpe-audit audit <kind>``: membership inference, mechanism, fidelity and utility audits.

Each kind writes a JSON report (``--report``; default next to the synthetic file, or in
the current folder) and prints a summary. Reports are statistics of private rows, not DP
outputs: they stay in the enclave and are never written into an artifact folder. Exit
status: 0 when the audit ran and found nothing wrong, 1 when it found a violation (a
mechanism's empirical epsilon above its claim, or an MIA beyond the DP bound), 2 for user
errors.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from audits import (
    anonymeter_risks,
    fidelity,
    mechanism,
    mia,
    release_audit,
    report,
    utility,
)
from audits.io import (
    jsonable,
    load_embedder,
    load_record_schema,
    refuse_artifact_folder,
    subsample,
    write_report,
)
from audits.kinds import (
    PLUGIN_GROUP,
    AuditKind,
    audit_kinds,
    common_arguments,
    finish,
    make_report,
    read_rows,
    register,
)
from audits.report import report_summary
from release.dp import enable as enable_opendp
from release.private_data import read_private_rows
from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.cli.command import Command
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import CHANNEL_SETS, KernelConfig, channel_kind
from selpe_audit.plugins import load_plugins
from selpe_audit.schema import Schema, demo_schema_path, load_schema

# ----- arguments ---------------------------------------------------------------------------

def _mia_arguments(m: argparse.ArgumentParser) -> None:
    common_arguments(m)
    m.add_argument("--members", required=True, help="private rows the release used")
    m.add_argument("--non-members", required=True, help="held-out private rows it did not use")
    m.add_argument("--artifact", help="release artifact folder: compare with its epsilon")
    m.add_argument("--trust", action="append", default=[],
                   help="public key to verify the artifact with (repeatable; without it the "
                        "epsilon is read unverified)")
    m.add_argument("--epsilon", type=float, help="compare with this epsilon (no artifact)")
    m.add_argument("--variants", default=",".join(mia.VARIANTS),
                   help="comma-separated attacks: kernel, tfidf (default both)")
    m.add_argument("--kernel-channels", choices=sorted(CHANNEL_SETS),
                   help="kernel channel set (default full; 'numeric' needs no embedder)")
    m.add_argument("--embedder", help="sentence-transformers model folder (default bundled)")
    m.add_argument("--max-targets", type=int, default=2000,
                   help="at most this many members and non-members each (seeded sample)")
    m.add_argument("--seed", type=int, default=0, help="seed of sampling and bootstrap")
    m.add_argument("--no-anonymeter", action="store_true", help="skip anonymeter's attacks")
    m.add_argument("--anonymeter-attacks", type=int, default=500)



def _mechanism_arguments(k: argparse.ArgumentParser) -> None:
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



def _fidelity_arguments(f: argparse.ArgumentParser) -> None:
    common_arguments(f)
    f.add_argument("--real", required=True, help="real (private) rows to compare with")



def _utility_arguments(u: argparse.ArgumentParser) -> None:
    common_arguments(u)
    u.add_argument("--real-train", required=True, help="real rows for the same-size baseline")
    u.add_argument("--real-test", required=True, help="real rows to test on")
    u.add_argument("--embedder", help="sentence-transformers model folder (default bundled)")
    u.add_argument("--seed", type=int, default=0)



def _report_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("--synthetic", required=True,
                   help="synthetic records (.csv, .parquet or .jsonl)")
    r.add_argument("--schema", required=True, help="dataset schema (JSON)")
    r.add_argument("--real-train", required=True,
                   help="the private rows the release read (the MIA's members, the "
                        "distributions' and TSTR baseline's real side)")
    r.add_argument("--real-test", required=True,
                   help="held-out private rows the release did not read (TSTR's test set, "
                        "the MIA's non-members)")
    r.add_argument("--artifact", help="release artifact folder: its guarantee, its DP bound "
                                      "on the ROC curves, its codebook for free text")
    r.add_argument("--trust", action="append", default=[],
                   help="public key to verify the artifact with (repeatable; without it the "
                        "artifact is read unverified, and the page says so)")
    r.add_argument("--out", required=True, help="the HTML page to write; a JSON file with "
                                                "every number goes beside it (.json)")
    r.add_argument("--embedder", help="sentence-transformers model folder (default bundled)")
    r.add_argument("--max-targets", type=int, default=2000,
                   help="MIA: at most this many members and non-members each (seeded)")
    r.add_argument("--no-sdmetrics", action="store_true",
                   help="leave out SDMetrics' quality report")
    r.add_argument("--invalid-rows", choices=["fail", "drop"], default="fail",
                   help="private rows that break the schema: stop (default) or leave out")
    r.add_argument("--seed", type=int, default=0)


# ----- helpers -----------------------------------------------------------------------------

def _kernel_embeds(schema: Schema, channels: str | None) -> bool:
    """Whether the MIA's kernel with these channels (None: the full set) needs the embedder."""
    return any(channel_kind(c) != "num" for c in KernelConfig(channels=channels).resolve(schema))


def _artifact_view(artifact: str, trust: list[str]) -> Any:
    """The artifact's `ReleaseView`: verified against ``trust`` when given, else read
    unverified. Only its ledger, guarantees and codebooks are read (the JSON Schema types
    them), so the view is read tolerantly."""
    from selpe_audit.artifact.document import read_release, read_release_unverified
    from selpe_audit.artifact.view import ReleaseView

    doc = read_release(artifact, trust).doc if trust else read_release_unverified(artifact)
    return ReleaseView.parse(doc)


def _artifact_epsilon(args: argparse.Namespace) -> tuple[float | None, float, dict[str, Any]]:
    if args.artifact and args.epsilon is not None:
        raise UserError("give --artifact or --epsilon, not both")
    if args.trust and not args.artifact:
        raise UserError("--trust verifies an artifact: pass --artifact too")
    if args.epsilon is not None:
        if args.epsilon < 0:
            raise UserError("--epsilon must be >= 0")
        return args.epsilon, 0.0, {"source": "--epsilon"}
    if not args.artifact:
        return None, 0.0, {"source": None}
    ledger = _artifact_view(args.artifact, args.trust).ledger
    return (float(ledger.total_epsilon), float(ledger.total_delta),
            {"source": str(Path(args.artifact)), "signature_verified": bool(args.trust)})


# ----- kinds -------------------------------------------------------------------------------

def _run_mia(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    try:
        cfg = mia.MiaConfig(variants=variants, kernel_channels=args.kernel_channels,
                            seed=args.seed)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.max_targets is not None and args.max_targets < 1:
        raise UserError("--max-targets must be at least 1")
    epsilon, delta, eps_source = _artifact_epsilon(args)
    schema = load_record_schema(args.schema)
    syn = read_rows(args.synthetic, schema, "fail")
    members = read_rows(args.members, schema, args.invalid_rows)
    non_members = read_rows(args.non_members, schema, args.invalid_rows)
    n_mem, n_non = len(members), len(non_members)
    members = subsample(members, args.max_targets, args.seed)
    non_members = subsample(non_members, args.max_targets, args.seed + 1)
    embedder = None
    if "kernel" in variants and _kernel_embeds(schema, args.kernel_channels):
        embedder = load_embedder(args.embedder)
    console = Console(stderr=True, highlight=False)
    with console.status("membership inference: distances to the synthetic records"):
        result = mia.run_mia(schema, syn, members, non_members, cfg, embedder, epsilon, delta)
    result["epsilon_source"] = eps_source
    result["sizes"].update({"members_in_file": n_mem, "non_members_in_file": n_non})
    if args.no_anonymeter:
        anon: dict[str, Any] = {"status": "skipped", "detail": "--no-anonymeter"}
    else:
        with console.status("anonymeter attacks"):
            anon = anonymeter_risks.run_anonymeter(schema, syn, members, non_members,
                                                   args.anonymeter_attacks, args.seed)
    config = {"variants": list(variants), "kernel_channels": args.kernel_channels or "full",
              "fprs": list(cfg.fprs), "seed": args.seed, "bootstrap": cfg.bootstrap,
              "max_targets": args.max_targets}
    inputs = {"synthetic": args.synthetic, "members": args.members,
              "non_members": args.non_members, "schema": args.schema}
    report = make_report("mia", inputs, config, result, t0)
    report["anonymeter"] = anon
    finish("mia", args, report, mia.render)
    return 1 if result.get("bound_violations") else 0


def _run_mechanism(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
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
    c = args.confidence  # every interval of the verdicts, if given
    strict = {} if c is None else {"confidence": c, "mu_confidence": c}
    release_strict = {} if c is None else {"confidence": c, "noise_confidence": c}
    if not 0 < args.delta < 1:
        raise UserError("--delta must be in (0, 1)")
    schema = load_schema(demo_schema_path())  # public, fictional: mechanisms are data-blind
    kinds = (*mechanism.KINDS, "release") if args.kind == "all" else (args.kind,)
    console = Console(stderr=True, highlight=False)
    audits = []
    for kind in kinds:
        if kind == "release":
            for unit in ("row", "person") if args.unit == "both" else (args.unit,):
                runs = args.runs or release_audit.DEFAULT_RUNS
                a = release_audit.ReleaseAudit(epsilon=args.epsilon, unit=unit,
                                               calibrate_to=args.calibrate_to)
                with console.status(f"release ({unit} unit): {runs} full releases per "
                                    "dataset"):
                    audits.append(release_audit.audit_release(a, runs, args.calibration_runs,
                                                              **release_strict))
            continue
        runs = args.runs or mechanism.DEFAULT_RUNS[kind]
        if kind == "model":
            if args.counts_mode in mechanism.ADAPTIVE_MODES:
                runs = args.runs or mechanism.ADAPTIVE_RUNS
            for unit in mechanism.MODEL_UNITS if args.unit == "both" else (args.unit,):
                nb = mechanism.model_neighbours(schema, args.epsilon, args.delta, unit,
                                                args.calibrate_to, mode=args.counts_mode)
                with console.status(f"{nb.name}: {runs} runs per dataset"):
                    audits.append(mechanism.audit(nb, runs, args.calibration_runs, **strict))
            continue
        if kind == "selection":
            nb = mechanism.selection_neighbours(args.epsilon, args.calibrate_to,
                                                args.candidates)
        elif kind in mechanism.GAUSSIAN_KINDS:
            nb = mechanism.gaussian_neighbours(schema, kind, args.epsilon, args.delta,
                                               args.calibrate_to)
        elif kind in ("phrases", "keywords"):
            nb = mechanism.phrase_neighbours(args.epsilon, args.delta, args.calibrate_to,
                                             kind=kind)
        else:
            if args.field not in schema.field_names:
                raise UserError(f"--field: the demo schema has no field '{args.field}'")
            try:
                nb = mechanism.counts_neighbours(schema, args.epsilon, args.field,
                                                 calibrate_to=args.calibrate_to)
            except ValueError as e:
                raise UserError(f"--field: {e}") from None
        with console.status(f"{kind}: {runs} runs per dataset"):
            audits.append(mechanism.audit(nb, runs, args.calibration_runs, **strict))
    config = {"kinds": list(kinds), "epsilon": args.epsilon, "delta": args.delta,
              "unit": args.unit,
              "calibrate_to": args.calibrate_to,
              "candidates": args.candidates, "field": args.field, "runs": args.runs,
              "calibration_runs": args.calibration_runs, "confidence": args.confidence,
              "data": "fictional demo rows (selpe_audit.demo.generator), demo schema"}
    failed = [a["mechanism"] for a in audits if not a["passed"]]
    result = {"audits": audits, "passed": not failed, "failed": failed}
    report = make_report("mechanism", {}, config, result, t0)
    finish("mechanism", args, report, mechanism.render)
    if failed:
        Console(stderr=True, highlight=False).print(
            f"[bold red]FAIL[/]: empirical epsilon above the claimed {args.epsilon:g} for "
            f"{', '.join(failed)}")
        return 1
    return 0


def _run_fidelity(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    schema = load_record_schema(args.schema)
    syn_table = read_private_rows(args.synthetic, schema, invalid="drop")
    real = read_rows(args.real, schema, args.invalid_rows)
    result = fidelity.run_fidelity(schema, syn_table, real)
    inputs = {"synthetic": args.synthetic, "real": args.real, "schema": args.schema}
    report = make_report("fidelity", inputs, {}, result, t0)
    finish("fidelity", args, report, fidelity.render)
    return 0


def _run_utility(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    schema = load_record_schema(args.schema)
    syn = read_rows(args.synthetic, schema, "fail")
    train = read_rows(args.real_train, schema, args.invalid_rows)
    test = read_rows(args.real_test, schema, args.invalid_rows)
    embedder = load_embedder(args.embedder) if schema.by_kind("text") else None
    with Console(stderr=True, highlight=False).status("training and scoring"):
        result = utility.run_utility(schema, syn, train, test, embedder, args.seed)
    inputs = {"synthetic": args.synthetic, "real_train": args.real_train,
              "real_test": args.real_test, "schema": args.schema}
    config = {"seed": args.seed, "embedder": args.embedder or "bundled default"}
    report = make_report("utility", inputs, config, result, t0)
    finish("utility", args, report, utility.render)
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from audits.report_page import render_report_html

    t0 = time.perf_counter()
    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--out {out}: give an .html file for the page")
    if args.trust and not args.artifact:
        raise UserError("--trust verifies an artifact: pass --artifact too")
    if args.max_targets < 1:
        raise UserError("--max-targets must be at least 1")
    refuse_artifact_folder(out)
    schema = load_record_schema(args.schema)
    view = _artifact_view(args.artifact, args.trust) if args.artifact else None
    syn_table = read_private_rows(args.synthetic, schema, invalid="drop")
    train = read_rows(args.real_train, schema, args.invalid_rows)
    test = read_rows(args.real_test, schema, args.invalid_rows)
    # utility embeds free text; the MIA's full kernel embeds text and the whole record
    needs_embedder = schema.by_kind("text") or _kernel_embeds(schema, None)
    embedder = load_embedder(args.embedder) if needs_embedder else None
    console = Console(stderr=True, highlight=False)
    with console.status("audit report") as status:
        try:
            result = report.build_report(
                schema, syn_table, train, test, embedder, view, seed=args.seed,
                max_targets=args.max_targets, use_sdmetrics=not args.no_sdmetrics,
                progress=lambda step: status.update(f"audit report: {step}"))
        except ValueError as e:
            raise UserError(f"{args.synthetic}: {e}") from None
    inputs = {"synthetic": args.synthetic, "real_train": args.real_train,
              "real_test": args.real_test, "schema": args.schema}
    config = {"seed": args.seed, "max_targets": args.max_targets,
              "embedder": args.embedder or "bundled default",
              "sdmetrics": not args.no_sdmetrics}
    doc = make_report("report", inputs, config, result, t0)
    doc["dataset"] = view.dataset if view is not None else schema.name
    if view is not None:
        g = view.guarantees
        doc["artifact"] = {"path": str(Path(args.artifact)), "verified": bool(args.trust),
                           "epsilon": view.ledger.total_epsilon,
                           "delta": view.ledger.total_delta,
                           "statements": list(g.statements)}
    json_path = write_report(out.with_suffix(".json"), doc)
    html = render_report_html(jsonable(doc))
    try:
        atomic_write_bytes(out, html.encode("utf-8"))
    except OSError as e:
        raise UserError(f"{out}: cannot write the report ({e.strerror})") from None
    con = Console(highlight=False)
    con.print(report_summary(doc))
    con.print(f"report: {out} (numbers: {json_path}); statistics of private rows, not DP: "
              "keep it in the enclave")
    return 1 if result["mia"].get("bound_violations") else 0


for _kind in (
        AuditKind("mia", "membership inference (DCR attack) vs. the DP bound", _mia_arguments,
                  _run_mia, mia.__doc__),
        AuditKind("mechanism", "Monte-Carlo epsilon audit of the release mechanisms (FAILs "
                  "above the claim)", _mechanism_arguments, _run_mechanism, mechanism.__doc__),
        AuditKind("fidelity", "schema validity and 1-/2-way TVD to real data",
                  _fidelity_arguments, _run_fidelity, fidelity.__doc__),
        AuditKind("utility", "train on synthetic, test on real (macro OvR ROC AUC)",
                  _utility_arguments, _run_utility, utility.__doc__),
        AuditKind("report", "one HTML page: fidelity, TSTR, text, MIA vs. the DP bound, "
                  "SDMetrics", _report_arguments, _run_report, report.__doc__)):
    register(_kind)
load_plugins(PLUGIN_GROUP, "audit")  # kinds of other packages, after the built-ins


def _add_arguments(p: argparse.ArgumentParser) -> None:
    """One subcommand per registered kind (`audits.kinds`)."""
    sub = p.add_subparsers(dest="audit_kind", metavar="KIND")
    for kind in audit_kinds().values():
        kind.add_arguments(sub.add_parser(
            kind.name, help=kind.help, description=kind.description,
            formatter_class=argparse.RawDescriptionHelpFormatter))


def _run(args: argparse.Namespace) -> int:
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    kinds = audit_kinds()
    name = getattr(args, "audit_kind", None)
    if name not in kinds:
        raise UserError(f"choose an audit: {', '.join(kinds)} (see 'selpe-audit audit --help')")
    return kinds[name].run(args)


COMMAND = Command(
    name="audit",
    help="(enclave) membership-inference, mechanism, fidelity and utility audits",
    description="Audits of a release and of synthetic records, run where the private rows "
                "are (one subcommand per kind, below). Reports hold statistics of private "
                "rows: keep them in the enclave. Audits never write into an artifact folder.",
    add_arguments=_add_arguments,
    run=_run,
)
