"""``selpe-audit demo``: every stage end to end on the bundled, fictional demo data.

The demo drives the other subcommands exactly as a user would type them (through the
command registry, so this shared module imports no stage package). Stages that have not
been built yet are reported as such and skipped; nothing pretends to have run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from selpe_audit.cli.command import Command
from selpe_audit.demo.generator import generate_rows, write_rows
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path

DATA = Path(__file__).parents[1] / "data" / "ed_triage_sample.csv"
#: the demo generator's TSTR gaps by table size, as `benchmarks.small_tables` measured them
EXPECTED_GAPS = Path(__file__).parents[1] / "data" / "expected_gaps.json"
REPORT = "report.html"
LOG_TAIL = 15


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="out/demo", help="folder for everything the demo writes")
    p.add_argument("--epsilon", type=float, default=2.0, help="total epsilon of the release")
    p.add_argument("--n", type=int, default=400,
                   help="synthetic records to decode from the released graphical model")
    p.add_argument("--llm-n", type=int, default=20,
                   help="synthetic records to decode with the default LLM as well (about 1 "
                        "record/s on 2 CPU cores; 0 = skip)")
    p.add_argument("--selection", action="store_true",
                   help="spend half of epsilon on the SelPE selection of exemplars (for the "
                        "LLM decoder's prompt; the default spends it all on the counts)")
    p.add_argument("--llm-candidates", action="store_true",
                   help="with --selection: generate the candidates with the LLM instead of "
                        "the public demo pool (much slower on a CPU)")
    p.add_argument("--keep", action="store_true", help="keep an existing output folder")


def _demo_ledger(out: Path) -> list[str]:
    """A demo ledger beside the demo's outputs, unless the installation (the enclave image)
    fixes the ledger folder (``SELPE_AUDIT_LEDGER_FIXED``): then the demo charges that one."""
    fixed = os.environ.get("SELPE_AUDIT_LEDGER_FIXED", "").strip().lower()
    return [] if fixed in ("1", "true", "yes", "on") else [
        "--lifetime-ledger", str(out / "enclave-ledger")]


def steps(out: Path, epsilon: float, n: int, llm_n: int, llm_candidates: bool = False,
          selection: bool = False) -> list[tuple[str, list[str]]]:
    """The demo as the command lines a steward, reviewer, analyst and auditor would run."""
    keys, art = out / "keys", out / "release"
    schema = str(demo_schema_path())
    trust = ["--release-key", str(keys / "release.pub.pem"),
             "--trust", str(keys / "reviewer.pub.pem"), "--require-approvals", "1"]
    synth, synth_llm = out / "synthetic.parquet", out / "synthetic_llm.parquet"
    run = [
        ("keygen (release key)", ["keygen", str(keys / "release.pem")]),
        ("keygen (reviewer key)", ["keygen", str(keys / "reviewer.pem")]),
        ("release (enclave)", [
            "release", "--config", str(Path(__file__).parents[1] / "data" / "demo_release.toml"),
            "--data", str(DATA), "--schema", schema, "--out", str(art),
            "--key", str(keys / "release.pem"), "--epsilon", str(epsilon),
            *_demo_ledger(out),
            *(["--counts-share", "0.5"] if selection or llm_candidates else []),
            *([] if llm_candidates else ["--candidates", str(out / "candidate_pool.jsonl")])]),
        ("review", ["review", str(art), "--release-key", str(keys / "release.pub.pem")]),
        ("approve", ["approve", str(art), "--key", str(keys / "reviewer.pem"),
                     "--release-key", str(keys / "release.pub.pem"), "--yes"]),
        ("decode, released model (off-site)", [
            "decode", str(art), *trust, "--decoder", "model", "--n", str(n),
            "--out", str(synth)]),
    ]
    if llm_n > 0:
        run.append(("decode, LLM (off-site)", [
            "decode", str(art), *trust, "--decoder", "llm", "--n", str(llm_n),
            "--out", str(synth_llm)]))
    run.append(("audit report (enclave)", [
        "audit", "report", "--synthetic", str(synth), "--real-train", str(DATA),
        "--real-test", str(out / "non_members.csv"), "--schema", schema, "--artifact", str(art),
        "--trust", str(keys / "release.pub.pem"), "--out", str(out / REPORT)]))
    return run


def _run(args: argparse.Namespace) -> int:
    from selpe_audit.cli.main import build_parser, load_commands  # the registry, at run time

    con = Console(highlight=False, file=sys.stdout)
    out = Path(args.out)
    if out.exists() and not args.keep:
        shutil.rmtree(out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    # Fictional people who are not in the released sample: the audits' non-members.
    write_rows(generate_rows(400, seed=1), out / "non_members.csv")
    # A public candidate pool: fictional records from another seed, no person ids.
    (out / "candidate_pool.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
        for r in generate_rows(300, seed=2)))
    parser = build_parser(load_commands())
    run = steps(out, args.epsilon, args.n, args.llm_n, args.llm_candidates, args.selection)
    con.print(f"[bold]selpe-audit demo[/]: {len(run)} steps on the fictional demo data; each "
              f"step's full output goes to {out}/logs/")
    for i, (title, argv) in enumerate(run, 1):
        log = out / "logs" / f"{i:02d}-{argv[0]}{'-' + argv[1] if argv[0] == 'audit' else ''}.log"
        t0 = time.perf_counter()
        with con.status(f"{title}: selpe-audit {argv[0]} ..."):
            code, error = _step(parser, argv, log)
        took = f"{time.perf_counter() - t0:.0f} s"
        if error is not None or code != 0:
            con.print(f"[red]✗[/] {title} ({took}): "
                      + (error or f"exit {code}") + f"\n  command: selpe-audit {' '.join(argv)}"
                      f"\n  last lines of {log}:")
            con.print("\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL:]),
                      markup=False)
            if error is not None:
                return 2
            continue  # an audit that finds a violation exits 1: show it, go on
        con.print(f"[green]✓[/] {title} ({took}): {step_summary(argv, out, log)}",
                  markup=True, highlight=False)
    con.print(results_table(out))
    if (out / REPORT).exists():
        con.print(f"[bold]audit report[/]: {out / REPORT} (open it in a browser; statistics of "
                  "private rows, not DP: it stays in the enclave)")
    con.print(f"everything is under {out}/")
    return 0


def _step(parser: argparse.ArgumentParser, argv: list[str],
          log: Path) -> tuple[int, str | None]:
    """Run one subcommand in this process with its output in ``log``; (exit code, the
    one-line error of a user error, else None)."""
    ns = parser.parse_args(argv)
    with log.open("w") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        try:
            return int(ns._run(ns) or 0), None
        except UserError as e:
            print(f"error: {e}")
            return 2, str(e)


def _warning_kinds(art: Path) -> str:
    from selpe_audit.artifact.document import read_release_unverified
    from selpe_audit.review.view import as_view, review_warnings

    kinds = Counter(w.kind for w in review_warnings(as_view(read_release_unverified(art))))
    if not kinds:
        return "no warnings"
    counted = ", ".join(f"{k} {n}" for k, n in kinds.most_common())
    return (f"{sum(kinds.values())} warnings ({counted}); each one is on "
            f"{art / 'review.html'} and in 'selpe-audit review --all'")


def step_summary(argv: list[str], out: Path, log: Path) -> str:
    """One line per step, read back from what the step wrote."""
    cmd = argv[0]
    if cmd == "keygen":
        return f"-> {argv[1]} (private, 0600) and {Path(argv[1]).stem}.pub.pem"
    if cmd == "approve":
        return f"the reviewer key signed release.json -> {Path(argv[1]) / 'signatures'}/"
    if cmd == "release":
        art = _load(out / "release" / "release.json")
        if art:
            led = art["ledger"]
            return (f"epsilon {led['total_epsilon']:.4g} of {art['budget']['epsilon']:g} spent "
                    f"by {len(led['entries'])} OpenDP mechanisms -> {out / 'release'}")
    if cmd == "review":
        return _warning_kinds(out / "release")
    if cmd == "decode":
        target = Path(argv[argv.index("--out") + 1])
        prov = _load(target.with_name(f"{target.name}.provenance.json"))
        if prov:
            return (f"{prov['output']['rows']} records, "
                    f"{100 * prov['validity']['share_valid']:.0f} % valid, "
                    f"{prov['generation']['records_per_s']:.3g} records/s -> {target}")
    if cmd == "audit" and (out / REPORT).exists():
        return f"-> {out / REPORT}"
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()]
    return lines[-1].strip() if lines else "done"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def results_table(out: Path) -> Table:
    """The numbers a reader of the demo wants at the end, read back from what was written."""
    t = Table(title="demo results")
    t.add_column("what")
    t.add_column("value")
    art = _load(out / "release" / "release.json")
    if art:
        led, sel = art["ledger"], art.get("selection") or {}
        t.add_row("epsilon spent (OpenDP ledger)",
                  f"{led['total_epsilon']:.4g} of {art['budget']['epsilon']:g}, "
                  f"{len(led['entries'])} mechanisms")
        if sel:
            t.add_row("SelPE selection", f"T = {sel['T']} rounds, K = {sel['K']}, b = {sel['b']}, "
                      f"candidates: {sel['candidates'].get('kind', '?')}")
    report = _load((out / REPORT).with_suffix(".json"))
    if not report:
        return t
    r = report["result"]
    t.add_row("validity (strict JSON Schema)", f"{100 * r['validity']['strict_valid']:.1f} %")
    t.add_row("fidelity: mean 1-way TVD (worst field)",
              f"{sum(f['tvd'] for f in r['fields']) / len(r['fields']):.3f} "
              f"({r['fields'][0]['field']} {r['fields'][0]['tvd']:.3f})")
    for name, m in r["utility"]["models"].items():
        t.add_row(f"utility ({name}): TSTR AUC vs real",
                  f"{m['synthetic']['macro_auc']:.3f} vs {m['real_sample']['macro_auc']:.3f}")
    if art and (context := expected_gaps(art)):
        t.add_row("what a table this size gets (benchmark)", context)
    for name, q in (r["utility"].get("text") or {}).items():
        t.add_row(f"text TSTR ({name}) vs real", f"{q['tstr']['synthetic']['macro_auc']:.3f} vs "
                  f"{q['tstr']['real_sample']['macro_auc']:.3f}")
    bound = r["mia"].get("dp_bound", {}).get("tpr_max", [{}])[0].get("tpr_max")
    for name, a in r["mia"]["attacks"].items():
        tpr = a["tpr_at_fpr"][0]["tpr"]
        t.add_row(f"MIA ({name} DCR): AUC, TPR @ FPR 1 %",
                  f"{a['roc_auc']:.3f}, {tpr:.3f}"
                  + (f" (DP bound <= {bound:.3f})" if bound is not None else ""))
    sd = r.get("sdmetrics", {})
    if sd.get("status") == "ok":
        t.add_row("SDMetrics quality score (independent)", f"{100 * sd['score']:.1f} %")
    return t


def expected_gaps(art: dict, path: Path = EXPECTED_GAPS) -> str | None:
    """One line that puts the demo's TSTR in context: the gaps (real sample minus synthetic
    AUC, text blanked) `benchmarks.small_tables` measured for the default release of the
    demo generator's rows at the sizes nearest this release's (its plan's DP row count),
    next to smartnoise-synth's AIM on the same rows. None without those measurements."""
    measured = _load(path)
    rows = ((art.get("budget") or {}).get("plan") or {}).get("rows")
    if not measured or not measured.get("gaps") or not isinstance(rows, int):
        return None
    sizes = sorted(int(n) for n in measured["gaps"])
    below = [n for n in sizes if n <= rows] or sizes[:1]
    above = [n for n in sizes if n > below[-1]]
    parts = []
    for n in [below[-1], *above[:1]]:
        got = measured["gaps"][str(n)]
        ours, aim = got.get("ours"), got.get("aim")
        if ours is None:
            continue
        parts.append(f"at {n:,} rows a gap of {ours['lr']:.2f} (LR) / {ours['gb']:.2f} (GB)"
                     + (f", smartnoise AIM {aim['lr']:.2f} / {aim['gb']:.2f}" if aim else ""))
    if not parts:
        return None
    eps = measured.get("epsilon")
    note = "" if eps == art["budget"].get("epsilon") else f" (measured at epsilon {eps:g})"
    return (f"about {rows:,} rows here; " + "; ".join(parts) + note
            + " - gap: a same-size real sample's TSTR AUC minus the synthetic one's")


COMMAND = Command(
    name="demo",
    help="run keygen, release, review, approve, decode and audits on the demo data",
    description="Run every stage on the bundled fictional ED-triage demo data with the "
                "default models, writing everything under one folder (default out/demo).",
    add_arguments=_add_arguments,
    run=_run,
)
