"""Membership inference: distance to the closest synthetic record (DCR), members vs. not.

The attacker holds the synthetic records and a target row; it scores the target by
-DCR (the closer a synthetic record, the likelier the target was a member). Two distances:

- ``kernel``: SelPE's multi-channel kernel (`selpe_audit.kernel.distance`), the distance the release
  itself uses, with numeric scales fitted on the synthetic records (what the attacker has);
- ``tfidf``: 1 - cosine similarity of TF-IDF vectors (word 1-2 grams) of the linearised
  records, a cheap model-free baseline (vocabulary and IDF from synthetic + targets, which
  the attacker holds).

Reported per variant: ROC AUC (bootstrap interval), TPR at FPR 1 % and 0.1 % (Clopper-
Pearson on the TPR at the empirical threshold), the empirical advantage, and DCR quantiles;
overall: the exact-copy rate (share of synthetic records identical, field by field, to a
member record; the same against non-members as the chance level). Beside them, what the
artifact's epsilon allows (`selpe_audit.artifact.guarantees`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from sklearn.feature_extraction.text import TfidfVectorizer

from audits import anonymeter_risks, stats
from audits.io import load_embedder, load_record_schema, subsample
from audits.kinds import (
    AuditKind,
    artifact_view,
    common_arguments,
    finish,
    make_report,
    read_rows,
    register,
)
from audits.scoring import TOKEN_PATTERN
from selpe_audit.artifact.guarantees import advantage_bound, tpr_bound
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import (
    CHANNEL_SETS,
    Kernel,
    KernelConfig,
    TextEncoder,
    channel_kind,
)
from selpe_audit.schema import Schema, format_value

VARIANTS = ("kernel", "tfidf")
FPRS = (0.01, 0.001)
_CELLS = 4_000_000  # targets x synthetic distances held at once (per channel, float64)

Row = dict[str, Any]


@dataclass(frozen=True)
class MiaConfig:
    """How the attack runs; everything public."""

    variants: tuple[str, ...] = VARIANTS
    kernel_channels: str | None = None  # a named set of `selpe_audit.kernel.CHANNEL_SETS`
    fprs: tuple[float, ...] = FPRS
    seed: int = 0
    bootstrap: int = 1000

    def __post_init__(self) -> None:
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise ValueError(f"unknown MIA variant(s) {bad}; choose from {list(VARIANTS)}")


# ----- distances -------------------------------------------------------------------------

def kernel_dcr(schema: Schema, syn: Sequence[Row], targets: Sequence[Row],
               embedder: TextEncoder | None, channels: str | None = None) -> np.ndarray:
    """min over synthetic records of the kernel distance g(target, s), one value per target."""
    kernel = Kernel(schema, embedder, KernelConfig(channels=channels))
    feats = kernel.featurize([*syn, *targets])  # one encoder call: shared texts encode once
    n = len(syn)
    syn_f, tgt_f = feats.take(np.arange(n)), feats.take(np.arange(n, feats.n))
    scale = kernel.fit_scale(syn_f)
    out = np.empty(tgt_f.n)
    step = _chunk(n)
    for start in range(0, tgt_f.n, step):
        part = tgt_f.take(np.arange(start, min(start + step, tgt_f.n)))
        out[start:start + part.n] = kernel.pairwise(part, syn_f, scale).min(axis=1)
    return out


def tfidf_dcr(schema: Schema, syn: Sequence[Row], targets: Sequence[Row]) -> np.ndarray:
    """min over synthetic records of 1 - cos(tfidf(target), tfidf(s))."""
    syn_text = [schema.linearize(r) for r in syn]
    tgt_text = [schema.linearize(r) for r in targets]
    vec = TfidfVectorizer(token_pattern=TOKEN_PATTERN, ngram_range=(1, 2), sublinear_tf=True,
                          dtype=np.float64)
    vec.fit(syn_text + tgt_text)
    s, t = vec.transform(syn_text), vec.transform(tgt_text)  # rows are L2-normalised
    out = np.empty(len(tgt_text))
    step = _chunk(len(syn_text))
    for start in range(0, len(tgt_text), step):
        sim = (t[start:start + step] @ s.T).toarray()
        out[start:start + sim.shape[0]] = 1.0 - sim.max(axis=1)
    return np.clip(out, 0.0, 1.0)


def _chunk(n_syn: int) -> int:
    """Targets per block, so that a block of distances stays around 32 MB."""
    return max(1, _CELLS // max(1, n_syn))


def record_key(schema: Schema, r: Row) -> tuple[str, ...]:
    """A record's fields as the schema formats them (numbers at their precision)."""
    return tuple(format_value(f, r[f.name]) for f in schema.record_fields)


def exact_copy_rate(schema: Schema, syn: Sequence[Row], reference: Sequence[Row]) -> float:
    """Share of synthetic records identical, on every record field, to a reference row."""
    keys = {record_key(schema, r) for r in reference}
    return sum(record_key(schema, r) in keys for r in syn) / len(syn)


# ----- the audit ---------------------------------------------------------------------------

def attack_summary(dcr_mem: np.ndarray, dcr_non: np.ndarray, cfg: MiaConfig) -> dict[str, Any]:
    """Scores are -DCR: members should sit closer to the synthetic records."""
    pos, neg = -dcr_mem, -dcr_non
    lo, hi = stats.auc_bootstrap_ci(pos, neg, cfg.seed, cfg.bootstrap)
    return {
        "roc_auc": stats.auc(pos, neg),
        "roc_auc_ci95": [lo, hi],
        "advantage": stats.max_advantage(pos, neg),
        "tpr_at_fpr": [stats.tpr_at_fpr(pos, neg, f).to_json() for f in cfg.fprs],
        "dcr": {"members": stats.quantiles(dcr_mem), "non_members": stats.quantiles(dcr_non)},
        "roc": stats.roc_points(pos, neg),
    }


def bound_block(epsilon: float, delta: float, fprs: Sequence[float]) -> dict[str, Any]:
    return {"epsilon": epsilon, "delta": delta,
            "tpr_max": [{"fpr": f, "tpr_max": tpr_bound(epsilon, delta, f)} for f in fprs],
            "advantage_max": advantage_bound(epsilon, delta),
            "formula": "TPR <= min(1, e^eps FPR + delta, 1 - e^-eps (1 - delta - FPR)); "
                       "advantage <= tanh(eps / 2)"}


def compare_to_bound(attacks: dict[str, Any], bound: dict[str, Any]) -> list[str]:
    """Violations the data show with confidence: the TPR's lower CP bound above the bound."""
    out = []
    limits = {b["fpr"]: b["tpr_max"] for b in bound["tpr_max"]}
    for name, a in attacks.items():
        for t in a["tpr_at_fpr"]:
            ci = t["tpr_ci95"]
            if ci is not None and ci[0] > limits[t["target_fpr"]] + 1e-12:
                out.append(f"{name}: TPR at FPR {t['target_fpr']:g} is at least {ci[0]:.3f} "
                           f"(95 % CI), above the bound {limits[t['target_fpr']]:.4f}")
    return out


def run_mia(schema: Schema, syn: Sequence[Row], members: Sequence[Row],
            non_members: Sequence[Row], cfg: MiaConfig, embedder: TextEncoder | None = None,
            epsilon: float | None = None, delta: float = 0.0) -> dict[str, Any]:
    """The whole attack on already-read records; returns the report body."""
    if not syn or not members or not non_members:
        raise ValueError("the MIA needs synthetic records, members and non-members")
    targets = [*members, *non_members]
    n_mem = len(members)
    attacks: dict[str, Any] = {}
    for variant in cfg.variants:
        if variant == "kernel":
            dcr = kernel_dcr(schema, syn, targets, embedder, cfg.kernel_channels)
        else:
            dcr = tfidf_dcr(schema, syn, targets)
        attacks[variant] = attack_summary(dcr[:n_mem], dcr[n_mem:], cfg)
    report: dict[str, Any] = {
        "sizes": {"synthetic": len(syn), "members": n_mem, "non_members": len(non_members)},
        "unit": "row (each member row is one target)",
        "score": "-DCR (distance to the closest synthetic record)",
        "attacks": attacks,
        "exact_copies": {
            "member_copy_rate": (copies := exact_copy_rate(schema, syn, members)),
            "nrs": 1.0 - copies,
            "non_member_copy_rate": exact_copy_rate(schema, syn, non_members),
            "definition": "copy rate: share of synthetic records identical on every record "
                          "field to a member (non-member) row, the non-member rate being the "
                          "chance level; NRS (novel record share) = 1 - member copy rate, "
                          "below 1 when any member is copied",
        },
        "kernel_channels": cfg.kernel_channels or "full",
    }
    if epsilon is not None:
        bound = bound_block(epsilon, delta, cfg.fprs)
        report["dp_bound"] = bound
        report["bound_violations"] = compare_to_bound(attacks, bound)
    return report


# ----- console -----------------------------------------------------------------------------

def render(report: dict[str, Any], console: Console) -> None:
    r = report["result"]
    bound = r.get("dp_bound")
    t, notes = _attacks_table(r, report["config"]["fprs"], bound)
    console.print(t)
    d = Table(title="distance to the closest synthetic record (min / p5 / median)")
    for col in ("attack", "members", "non-members"):
        d.add_column(col)
    for name, a in r["attacks"].items():
        d.add_row(name, *(f"{q['min']:.3f} / {q['p05']:.3f} / {q['median']:.3f}"
                          for q in (a["dcr"]["members"], a["dcr"]["non_members"])))
    console.print(d)
    for note in dict.fromkeys(notes):
        console.print(f"note: {note}")
    ec = r["exact_copies"]
    console.print(f"exact copies: {100 * ec['member_copy_rate']:.1f} % of synthetic records "
                  f"equal a member row, NRS {ec['nrs']:.3f} (chance level, non-members: "
                  f"{100 * ec['non_member_copy_rate']:.1f} %)")
    src = r.get("epsilon_source") or {}
    if bound and src.get("source") not in (None, "--epsilon"):
        how = "signature verified" if src.get("signature_verified") else (
            "[yellow]read unverified[/] (pass --trust to verify)")
        console.print(f"epsilon {bound['epsilon']:g} from the ledger of {src['source']}: {how}")
    if not bound:
        console.print("no artifact given (--artifact): no DP bound to compare with")
    elif r["bound_violations"]:
        for v in r["bound_violations"]:
            console.print(f"[bold red]EXCEEDS THE DP BOUND[/]: {v}")
    else:
        console.print("[green]within the DP bound[/] at every FPR measured")
    anon = report.get("anonymeter", {})
    if anon.get("status") == "ok":
        at = Table(title="anonymeter risks (residual vs. non-members)")
        for col in ("attack", "risk", "95 % CI"):
            at.add_column(col)
        for name, v in anon["risks"].items():
            at.add_row(name, f"{v['risk']:.3f}", f"[{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]")
        console.print(at)
    elif anon:
        console.print(f"anonymeter: {anon.get('status')} - {anon.get('detail', '')}")


def _attacks_table(r: dict[str, Any], fprs: list[float],
                   bound: dict[str, Any] | None) -> tuple[Table, list[str]]:
    """Each attack's AUC, TPR at each FPR and advantage, then the DP bound's row (if any),
    and the notes of the TPRs that could not be measured (printed below the tables)."""
    t = Table(title="membership inference (score = -DCR)")
    t.add_column("attack")
    t.add_column("ROC AUC [95 % CI]")
    for f in fprs:
        t.add_column(f"TPR @ FPR {100 * f:g} %")
    t.add_column("advantage")
    notes: list[str] = []
    for name, a in r["attacks"].items():
        lo, hi = a["roc_auc_ci95"]
        cells = []
        for x in a["tpr_at_fpr"]:
            if x["tpr"] is None:
                cells.append("n/a (note)")
                notes.append(x["note"])
            else:
                cells.append(f"{x['tpr']:.3f} [{x['tpr_ci95'][0]:.3f}, {x['tpr_ci95'][1]:.3f}]")
        t.add_row(name, f"{a['roc_auc']:.3f} [{lo:.3f}, {hi:.3f}]", *cells,
                  f"{a['advantage']:.3f}")
    if bound:
        t.add_row(f"DP bound, eps {bound['epsilon']:g}", "",
                  *(f"<= {b['tpr_max']:.4f}" for b in bound["tpr_max"]),
                  f"<= {bound['advantage_max']:.3f}")
    return t, notes

# ----- the ``selpe-audit audit mia`` kind ------------------------------------------------

def _arguments(m: argparse.ArgumentParser) -> None:
    common_arguments(m)
    m.add_argument("--members", required=True, help="private rows the release used")
    m.add_argument("--non-members", required=True, help="held-out private rows it did not use")
    m.add_argument("--artifact", help="release artifact folder: compare with its epsilon")
    m.add_argument("--trust", action="append", default=[],
                   help="public key to verify the artifact with (repeatable; without it the "
                        "epsilon is read unverified)")
    m.add_argument("--epsilon", type=float, help="compare with this epsilon (no artifact)")
    m.add_argument("--variants", default=",".join(VARIANTS),
                   help="comma-separated attacks: kernel, tfidf (default both)")
    m.add_argument("--kernel-channels", choices=sorted(CHANNEL_SETS),
                   help="kernel channel set (default full; 'numeric' needs no embedder)")
    m.add_argument("--embedder", help="sentence-transformers model folder (default bundled)")
    m.add_argument("--max-targets", type=int, default=2000,
                   help="at most this many members and non-members each (seeded sample)")
    m.add_argument("--seed", type=int, default=0, help="seed of sampling and bootstrap")
    m.add_argument("--no-anonymeter", action="store_true", help="skip anonymeter's attacks")
    m.add_argument("--anonymeter-attacks", type=int, default=500)


def kernel_embeds(schema: Schema, channels: str | None) -> bool:
    """Whether the MIA's kernel with these channels (None: the full set) needs the embedder."""
    return any(channel_kind(c) != "num" for c in KernelConfig(channels=channels).resolve(schema))


def artifact_epsilon(args: argparse.Namespace) -> tuple[float | None, float, dict[str, Any]]:
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
    ledger = artifact_view(args.artifact, args.trust).ledger
    return (float(ledger.total_epsilon), float(ledger.total_delta),
            {"source": str(Path(args.artifact)), "signature_verified": bool(args.trust)})


def _run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    try:
        cfg = MiaConfig(variants=variants, kernel_channels=args.kernel_channels,
                            seed=args.seed)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.max_targets is not None and args.max_targets < 1:
        raise UserError("--max-targets must be at least 1")
    epsilon, delta, eps_source = artifact_epsilon(args)
    schema = load_record_schema(args.schema)
    syn = read_rows(args.synthetic, schema, "fail")
    members = read_rows(args.members, schema, args.invalid_rows)
    non_members = read_rows(args.non_members, schema, args.invalid_rows)
    n_mem, n_non = len(members), len(non_members)
    members = subsample(members, args.max_targets, args.seed)
    non_members = subsample(non_members, args.max_targets, args.seed + 1)
    embedder = None
    if "kernel" in variants and kernel_embeds(schema, args.kernel_channels):
        embedder = load_embedder(args.embedder)
    console = Console(stderr=True, highlight=False)
    with console.status("membership inference: distances to the synthetic records"):
        result = run_mia(schema, syn, members, non_members, cfg, embedder, epsilon, delta)
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
    finish("mia", args, report, render)
    return 1 if result.get("bound_violations") else 0


AUDIT = register(AuditKind("mia", "membership inference (DCR attack) vs. the DP bound",
                           _arguments, _run, __doc__))
