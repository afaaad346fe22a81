"""``selpe-audit demo``: every stage end to end on the bundled, fictional demo data.

The demo drives the other subcommands exactly as a user would type them (through the
command registry, so this shared module imports no stage package). Stages that have not
been built yet are reported as such and skipped; nothing pretends to have run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from selpe_audit.cli.command import Command
from selpe_audit.demo.generator import generate_rows, write_rows
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path

DATA = Path(__file__).parents[1] / "data" / "ed_triage_sample.csv"


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="out/demo", help="folder for everything the demo writes")
    p.add_argument("--epsilon", type=float, default=2.0, help="total epsilon of the release")
    p.add_argument("--n", type=int, default=400,
                   help="synthetic records to decode from the released graphical model")
    p.add_argument("--llm-n", type=int, default=20,
                   help="synthetic records to decode with the default LLM as well (about 1 "
                        "record/s on 2 CPU cores; 0 = skip)")
    p.add_argument("--llm-candidates", action="store_true",
                   help="generate the release's selection candidates with the LLM instead of "
                        "the public demo pool (much slower on a CPU)")
    p.add_argument("--keep", action="store_true", help="keep an existing output folder")


def _demo_ledger(out: Path) -> list[str]:
    """A demo ledger beside the demo's outputs, unless the installation (the enclave image)
    fixes the ledger folder (``SELPE_AUDIT_LEDGER_FIXED``): then the demo charges that one."""
    fixed = os.environ.get("SELPE_AUDIT_LEDGER_FIXED", "").strip().lower()
    return [] if fixed in ("1", "true", "yes", "on") else [
        "--lifetime-ledger", str(out / "enclave-ledger")]


def steps(out: Path, epsilon: float, n: int, llm_n: int,
          llm_candidates: bool = False) -> list[tuple[str, list[str]]]:
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
    non_members = out / "non_members.csv"
    run += [
        ("audit: membership inference", [
            "audit", "mia", "--synthetic", str(synth), "--members", str(DATA),
            "--non-members", str(non_members), "--schema", schema, "--artifact", str(art),
            "--trust", str(keys / "release.pub.pem"), "--no-anonymeter",
            "--report", str(out / "audit-mia.json")]),
        ("audit: fidelity", ["audit", "fidelity", "--synthetic", str(synth), "--real", str(DATA),
                             "--schema", schema, "--report", str(out / "audit-fidelity.json")]),
        ("audit: utility", ["audit", "utility", "--synthetic", str(synth),
                            "--real-train", str(DATA), "--real-test", str(non_members),
                            "--schema", schema, "--report", str(out / "audit-utility.json")]),
    ]
    return run


def _run(args: argparse.Namespace) -> int:
    from selpe_audit.cli.main import build_parser, load_commands  # the registry, at run time

    con = Console(highlight=False)
    out = Path(args.out)
    if out.exists() and not args.keep:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    # Fictional people who are not in the released sample: the audits' non-members.
    write_rows(generate_rows(400, seed=1), out / "non_members.csv")
    # A public candidate pool: fictional records from another seed, no person ids.
    (out / "candidate_pool.jsonl").write_text("".join(
        json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
        for r in generate_rows(300, seed=2)))
    parser = build_parser(load_commands())
    summary = Table(title="demo summary")
    summary.add_column("step")
    summary.add_column("result")
    for title, argv in steps(out, args.epsilon, args.n, args.llm_n, args.llm_candidates):
        con.print(Rule(f"[bold]{title}[/]: selpe-audit {' '.join(argv)}"))
        ns = parser.parse_args(argv)
        t0 = time.perf_counter()
        try:
            code = int(ns._run(ns) or 0)
            took = f"{time.perf_counter() - t0:.0f} s"
            summary.add_row(title, f"[green]done[/] ({took})" if code == 0
                            else f"[red]exit {code}[/] ({took})")
        except UserError:
            summary.add_row(title, "[red]failed[/]")
            con.print(summary)
            raise
    con.print(summary)
    con.print(results_table(out))
    con.print(f"everything is under {out}/")
    return 0


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
    for name in ("synthetic.parquet", "synthetic_llm.parquet"):
        prov = _load(out / f"{name}.provenance.json")
        if prov:
            gen = prov["generation"]
            t.add_row(f"decoded: {name}", f"{prov['output']['rows']} records, decoder "
                      f"{prov['settings']['decoder']}, {100 * prov['validity']['share_valid']:.0f} "
                      f"% valid, {gen['records_per_s']:.2f} records/s")
    fid = _load(out / "audit-fidelity.json")
    if fid:
        r = fid["result"]
        t.add_row("validity (strict JSON Schema)", f"{100 * r['validity']['strict_valid']:.1f} %")
        t.add_row("fidelity: mean 1-way / 2-way TVD",
                  f"{r['overall']['mean_1way']:.3f} / {r['overall']['mean_2way']:.3f}")
    mia = _load(out / "audit-mia.json")
    if mia:
        r = mia["result"]
        bound = r.get("dp_bound", {}).get("tpr_max", [{}])[0].get("tpr_max")
        for name, a in r["attacks"].items():
            tpr = a["tpr_at_fpr"][0]["tpr"]
            t.add_row(f"MIA ({name} DCR): AUC, TPR @ FPR 1 %",
                      f"{a['roc_auc']:.3f}, {tpr:.3f}"
                      + (f" (DP bound <= {bound:.3f})" if bound is not None else ""))
    util = _load(out / "audit-utility.json")
    if util:
        for name, m in util["result"]["models"].items():
            t.add_row(f"utility ({name}): TSTR AUC vs real",
                      f"{m['synthetic']['macro_auc']:.3f} vs {m['real_sample']['macro_auc']:.3f}")
    return t


COMMAND = Command(
    name="demo",
    help="run keygen, release, review, approve, decode and audits on the demo data",
    description="Run every stage on the bundled fictional ED-triage demo data with the "
                "default models, writing everything under one folder (default out/demo).",
    add_arguments=_add_arguments,
    run=_run,
)
