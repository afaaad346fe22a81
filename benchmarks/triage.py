"""The triage demo end to end: release -> decode -> audits, per epsilon and per ablation.

    python -m benchmarks --only triage [--quick] [--set llm_n=N]

Data: the bundled fictional sample (``selpe_audit/data/ed_triage_sample.csv``, 400 rows) is
the private table and the audits' *members*; ``generate_rows(400, seed=1)`` (other fictional
people) is the held-out real test set for utility and the MIA's *non-members*.

Main rows, epsilon in {1, 2, 4, inf}: the default pipeline - a pool-mode release (half the
budget on the noisy counts, half on SelPE selection over a public pool of fictional rows,
T = 5 rounds, K = 3, b = 5; cohorts and rates of ``examples/release.toml``) decoded by the
marginals decoder with the select step (SelectTop, then the CoRTeC-style fit) to 400 rows.
"inf" is a release at epsilon = 1e6: OpenDP has no epsilon = infinity, and noise scales of
order 1e-5 (counts in rows, selection scores in [-1, 0]) make it exact for every practical
purpose.

Ablations at epsilon = 2, each checked to change what it claims to change:

- ``no_selection``: no selection rounds - a counts-only release (the whole budget on the
  counts), so the artifact has no winners or partners: SelectTop has nothing to rank by and
  the marginals decoder has no public text to copy (placeholder text);
- ``one_round``: T = 1 round with the same selection budget instead of T progressive rounds;
- ``no_partners``: the contrastive partners dropped from the artifact's view at decode (the
  LLM's prompts get no negatives; the marginals decoder copies text from winners only);
- ``single_stage``: LLM only - records written directly under the grammar, without the
  Stage I latent context;
- ``global_only``: the kernel restricted to the global embedding channel (release selection
  and decode's SelectTop both read the kernel from the artifact);
- ``no_select``: neither SelectTop nor the fit - the first rows of each class, from the same
  candidates as the default row.

The LLM rows (default, no_partners, single_stage, no_select: the whole-record decoder,
``--whole-records``, whose prompt these ablate; and ``hybrid``, the default ``--decoder llm``
when the artifact has a counts model) decode ``llm_n`` rows (10 by
default, over-generation 2: 20 candidates per configuration) from the epsilon = 2 artifact.
On 2 CPU cores the whole run took 6 minutes on an idle machine (LLM about 0.5 records/s)
and 49 minutes at ``--set llm_n=20`` on one shared with other LLM jobs (0.03-0.1 records/s, 36
minutes in the LLM). The LLM numbers are small-sample and noisy (utility
next to a real sample of the same size; gradient boosting cannot split on 20 rows and
scores 0.5 on both sides). Selection noise is never seeded (DP), so reruns differ.

``--quick`` (the CI smoke run): epsilon 2 only, the first 80 sample rows as members and 80
non-members, 60 marginals rows, 1 LLM row (2 candidates) per LLM configuration, T = 2, K = 2,
a pool of 120; every ablation still runs and is checked.

Per row: utility (TSTR macro ROC AUC, TF-IDF + logistic regression and gradient boosting,
each next to a real sample of the same size), fidelity (mean 1-way and 2-way TVD to the
real rows), validity (strict schema validity of the output, and the generator's share of
valid generations), MIA (kernel and TF-IDF distance to the closest record: TPR at 1 % FPR
and ROC AUC).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audits.fidelity import run_fidelity
from audits.io import load_embedder, read_records, read_records_lenient
from audits.mia import MiaConfig, run_mia
from audits.utility import run_utility
from benchmarks.local_decode import Candidates, LocalDecode
from benchmarks.suite import Benchmark, Plot, Result, fmt
from benchmarks.svg import line_chart
from decode.pipeline import DecodeSettings
from decode.released import Released, released_view
from decode.writers import write_records
from selpe_audit.artifact.document import read_release
from selpe_audit.demo.generator import generate_rows, write_rows
from selpe_audit.kernel.embeddings import Embedder
from selpe_audit.schema import Schema, demo_schema_path, load_schema

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv"
INF = 1e6
Row = dict[str, Any]


@dataclass(frozen=True)
class Sizes:
    """How big one run is (the full run, or the --quick smoke run)."""

    epsilons: tuple[float, ...]
    members: int    # private rows (the first of the sample) and as many non-members
    n: int          # marginals rows per configuration
    llm_n: int      # LLM rows per LLM configuration
    pool: int       # public candidate pool (fictional rows, another seed)
    rounds: int     # T
    k: int          # K


FULL = Sizes((1.0, 2.0, 4.0, INF), members=400, n=400, llm_n=10, pool=600, rounds=5, k=3)
QUICK = Sizes((2.0,), members=80, n=60, llm_n=1, pool=120, rounds=2, k=2)
ABLATION_EPSILON = 2.0


@dataclass
class Bench:
    """What every configuration shares: keys, pool, real rows, one embedder, one LLM."""

    folder: Path
    sizes: Sizes
    data: Path
    schema: Schema
    members: list[Row]
    non_members: list[Row]
    embedder: Embedder
    key: Path
    trust: Path
    pool: Path
    dec: LocalDecode


def make_bench(folder: Path, sizes: Sizes) -> Bench:
    """The triage bench in ``folder``: the demo schema, a release key, the candidate pool,
    member and non-member rows and a local decoder."""
    from selpe_audit.artifact.signing import generate_keypair

    schema = load_schema(demo_schema_path())
    key, trust, _ = generate_keypair(folder / "release.pem")
    pool = folder / "pool.jsonl"
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"})
                            + "\n" for r in generate_rows(sizes.pool, seed=12345)))
    embedder = load_embedder()
    data = DATA
    if sizes.members < 400:  # the first rows of the sample: less to embed in a smoke run
        data = folder / "members.csv"
        pl.read_csv(DATA, infer_schema=False).head(sizes.members).write_csv(data)
    non_members = write_rows(generate_rows(sizes.members, seed=1), folder / "non_members.csv")
    return Bench(folder, sizes, data, schema, read_records(data, schema),
                 read_records(non_members, schema), embedder, key, trust, pool,
                 LocalDecode())


def release(b: Bench, name: str, epsilon: float, **overrides: Any) -> tuple[Released, dict]:
    """One pool-mode release of the demo data (the benchmark may import release). Each
    configuration is a separate experiment on the same rows, with a ledger of its own: one
    ledger refuses the same rows under a second dataset name."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release

    settings = {"data": b.data, "schema": demo_schema_path(), "dataset": f"triage-{name}",
                "release_key": b.key, "out": b.folder / name, "epsilon": epsilon,
                "lifetime_epsilon": 2 * INF, "lifetime_ledger": b.folder / "ledger" / name,
                "candidates": b.pool, "counts_share": 0.5, "selection_share": 0.5,
                "rounds": b.sizes.rounds, "k": b.sizes.k, **overrides}
    cfg = load_config(ROOT / "examples" / "release.toml", settings)
    experiments = Installation.for_experiments("benchmark")  # many releases, public data
    doc = run_release(cfg, installation=experiments).doc  # the process's models, as the audits
    return released_view(read_release(cfg.out, [b.trust])), doc


def audit(b: Bench, name: str, records: list[Row], epsilon: float) -> dict[str, Any]:
    """Validity, fidelity, utility and MIA of one synthetic set against the real rows."""
    path = b.folder / f"{name}.parquet"
    write_records(path, records, b.schema)
    table = read_records_lenient(path, b.schema)
    fid = run_fidelity(b.schema, table, b.members)
    util = run_utility(b.schema, table.priv_rows, b.members, b.non_members, b.embedder, seed=0)
    mia = run_mia(b.schema, table.priv_rows, b.members, b.non_members,
                  MiaConfig(bootstrap=200), b.embedder, epsilon=epsilon)
    return {
        "rows": len(records),
        "validity_strict": fid["validity"]["strict_valid"],
        "tvd_1way": fid["overall"]["mean_1way"], "tvd_2way": fid["overall"]["mean_2way"],
        "utility": {m: {"synthetic": v["synthetic"]["macro_auc"],
                        "real_sample": v["real_sample"]["macro_auc"], "gap": v["gap"]}
                    for m, v in util["models"].items()},
        "mia": {v: {"tpr_at_1pct_fpr": a["tpr_at_fpr"][0]["tpr"], "roc_auc": a["roc_auc"]}
                for v, a in mia["attacks"].items()},
        "mia_tpr_bound_at_1pct": mia["dp_bound"]["tpr_max"][0]["tpr_max"],
    }


def row(b: Bench, name: str, epsilon: float, released: Released, cand: Candidates,
        settings: DecodeSettings) -> dict[str, Any]:
    """Select, audit and describe one configuration."""
    t0 = time.perf_counter()
    records, notes = b.dec.choose(released, cand, settings)
    out = {"config": name, "epsilon": "inf" if epsilon == INF else epsilon,
           "decoder": settings.decoder, "select_top": notes.get("select_top"),
           "fit": notes.get("fit", {}).get("applied"),
           "generation_validity": cand.validity,
           "generation_seconds": round(cand.seconds, 1),
           **audit(b, name, records, epsilon)}
    out["select_audit_seconds"] = round(time.perf_counter() - t0, 1)
    print(_line(out), flush=True)
    return out


def no_partners(released: Released) -> Released:
    """The artifact's view without contrastive partners (the ablation)."""
    return replace(released, partners={c: [] for c in released.classes})


def main_rows(b: Bench) -> tuple[list[dict[str, Any]], dict[float, Any]]:
    """The default pipeline per epsilon; keeps each artifact and its marginals candidates."""
    rows, kept = [], {}
    for eps in b.sizes.epsilons:
        released, doc = release(b, f"eps-{eps:g}", eps)
        # SelectTop on, as in the paper's pipeline (the CLI's marginals default is off)
        settings = DecodeSettings(n=b.sizes.n, decoder="marginals", select_top=True)
        cand = b.dec.generate(released, settings)
        rows.append(row(b, "default", eps, released, cand, settings))
        kept[eps] = (released, doc, cand)
    return rows, kept


def ablations(b: Bench, base: tuple[Released, dict, Candidates]) -> tuple[list, dict]:
    """Every ablation at epsilon = 2, with evidence that each changed what it claims to."""
    eps = ABLATION_EPSILON
    released, doc, cand = base
    marg = DecodeSettings(n=b.sizes.n, decoder="marginals", select_top=True)
    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}

    rel, d = release(b, "no-selection", eps, counts_share=1.0, selection_share=0.0)
    assert d["selection"] is None and rel.kernel is None and not any(rel.winners.values())
    checks["no_selection"] = {"artifact_selection": None, "default_T": doc["selection"]["T"]}
    rows.append(row(b, "no_selection", eps, rel, b.dec.generate(rel, marg), marg))

    rel, d = release(b, "one-round", eps, rounds=1)
    assert d["selection"]["T"] == 1 != doc["selection"]["T"]
    checks["one_round"] = {"T": 1, "default_T": doc["selection"]["T"]}
    rows.append(row(b, "one_round", eps, rel, b.dec.generate(rel, marg), marg))

    rel, d = release(b, "global-only", eps, channels="global")
    channels = d["selection"]["kernel"]["channels"]
    assert channels == ["global"] != doc["selection"]["kernel"]["channels"]
    checks["global_only"] = {"kernel_channels": channels,
                             "default_channels": len(doc["selection"]["kernel"]["channels"])}
    rows.append(row(b, "global_only", eps, rel, b.dec.generate(rel, marg), marg))

    rel = no_partners(released)
    assert any(released.partners.values()) and not any(rel.partners.values())
    checks["no_partners"] = {"partners": 0,
                             "default_partners": sum(map(len, released.partners.values()))}
    rows.append(row(b, "no_partners", eps, rel, b.dec.generate(rel, marg), marg))

    off = replace(marg, select_top=False, fit=False)
    rows.append(row(b, "no_select", eps, released, cand, off))
    assert rows[-1]["select_top"] == "off" and rows[-1]["fit"] is False
    checks["no_select"] = {"select_top": "off", "fit": False}
    llm_rows, llm_checks = llm_ablations(b, released)
    return rows + llm_rows, {**checks, **llm_checks}


def llm_ablations(b: Bench, released: Released) -> tuple[list, dict]:
    """The whole-record LLM decoder at epsilon = 2 (default, no partners, single stage, no
    select step: the ablations are about its prompt), and the hybrid decoder beside it when
    the artifact has a counts model."""
    eps = ABLATION_EPSILON
    llm = DecodeSettings(n=b.sizes.llm_n, decoder="llm", hybrid=False)
    cand = b.dec.generate(released, llm)
    assert cand.described["generation"]["two_stage"] is True
    rows = [row(b, "default", eps, released, cand, llm),
            row(b, "no_select", eps, released, cand, replace(llm, select_top=False, fit=False)),
            row(b, "no_partners", eps, no_partners(released),
                b.dec.generate(no_partners(released), llm), llm)]
    single = replace(llm, two_stage=False)
    cand1 = b.dec.generate(released, single)
    assert cand1.described["generation"]["two_stage"] is False
    rows.append(row(b, "single_stage", eps, released, cand1, single))
    if released.model is not None:
        hybrid = replace(llm, hybrid=True)
        cand2 = b.dec.generate(released, hybrid)
        assert cand2.described["name"] == "llm" and "counts_model" in cand2.described
        rows.append(row(b, "hybrid", eps, released, cand2, hybrid))
    return rows, {"single_stage": {"two_stage": False, "default_two_stage": True}}


def run(quick: bool = False, llm_n: int | None = None) -> dict[str, Any]:
    """Main rows and ablations; prints a table, returns the numbers and a markdown table."""
    sizes = QUICK if quick else FULL
    if llm_n is not None:
        sizes = replace(sizes, llm_n=llm_n)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        b = make_bench(Path(tmp), sizes)
        main, kept = main_rows(b)
        base = kept.get(ABLATION_EPSILON) or _base(b)
        abl, checks = ablations(b, base)
    result = {
        "members": len(b.members), "non_members": len(b.non_members),
        "sizes": {"marginals_rows": sizes.n, "llm_rows": sizes.llm_n, "overgenerate": 2.0,
                  "pool": sizes.pool, "T": sizes.rounds, "K": sizes.k, "b": 5},
        "epsilon_inf_means": INF, "ablation_epsilon": ABLATION_EPSILON,
        "main": main, "ablations": abl, "ablation_checks": checks,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    result["table"] = table(main, abl)
    print(result["table"])
    return result


def _base(b: Bench) -> tuple[Released, dict, Candidates]:
    """The epsilon = 2 default, when the main rows did not include it."""
    released, doc = release(b, "eps-2", ABLATION_EPSILON)
    return released, doc, b.dec.generate(released, DecodeSettings(n=b.sizes.n, decoder="marginals"))


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


COLUMNS = ("config", "eps", "decoder", "rows", "AUC LR syn/real", "AUC GB syn/real",
           "TVD 1w", "TVD 2w", "valid", "MIA TPR@1% kernel/tfidf", "MIA AUC kernel")


def _cells(r: dict[str, Any]) -> list[str]:
    u, m = r["utility"], r["mia"]
    return [r["config"], str(r["epsilon"]), r["decoder"], str(r["rows"]),
            f"{_f(u['tfidf_logreg']['synthetic'])}/{_f(u['tfidf_logreg']['real_sample'])}",
            f"{_f(u['hgb_embeddings']['synthetic'])}/{_f(u['hgb_embeddings']['real_sample'])}",
            _f(r["tvd_1way"]), _f(r["tvd_2way"]), f"{r['validity_strict']:.0%}",
            f"{_f(m['kernel']['tpr_at_1pct_fpr'])}/{_f(m['tfidf']['tpr_at_1pct_fpr'])}",
            _f(m["kernel"]["roc_auc"])]


def _line(r: dict[str, Any]) -> str:
    return ("  " + " | ".join(_cells(r)) + f" (generation {r['generation_seconds']:.0f} s, "
            f"select + audits {r['select_audit_seconds']:.0f} s)")


def table(main: Sequence[dict[str, Any]], abl: Sequence[dict[str, Any]]) -> str:
    """A markdown table of every row (main rows first, then the ablations at epsilon 2)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in [*main, *({**a, "config": f"ablation: {a['config']}"} for a in abl)]:
        lines.append("| " + " | ".join(_cells(r)) + " |")
    return "\n".join(lines)


def _summary(r: Result) -> str:
    by = {x["epsilon"]: x for x in r["main"]}
    x = by.get(2.0) or r["main"][0]
    u = x["utility"]["tfidf_logreg"]
    return (f"Default pipeline at eps {x['epsilon']}: TSTR LR {fmt(u['synthetic'])} vs real "
            f"{fmt(u['real_sample'])}, 1-way TVD {fmt(x['tvd_1way'])}, MIA AUC "
            f"{fmt(x['mia']['kernel']['roc_auc'])}.")


def _plots(r: Result) -> list[Plot]:
    xs = [x["epsilon"] if isinstance(x["epsilon"], str) else f"{x['epsilon']:g}"
          for x in r["main"]]
    svg = line_chart("Triage demo, default pipeline: TSTR AUC vs epsilon", xs, {
        "LR synthetic": [x["utility"]["tfidf_logreg"]["synthetic"] for x in r["main"]],
        "LR real sample": [x["utility"]["tfidf_logreg"]["real_sample"] for x in r["main"]],
        "GB synthetic": [x["utility"]["hgb_embeddings"]["synthetic"] for x in r["main"]],
        "GB real sample": [x["utility"]["hgb_embeddings"]["real_sample"] for x in r["main"]],
        "1-way TVD": [x["tvd_1way"] for x in r["main"]]}, "AUC / TVD",
        color_of={"LR synthetic": 0, "LR real sample": 0, "GB synthetic": 1,
                  "GB real sample": 1, "1-way TVD": 2},
        dashed=["LR real sample", "GB real sample"])
    return [("auc", "TSTR AUC and TVD vs epsilon", svg)]


BENCHMARK = Benchmark("triage", run, summary=_summary, plots=_plots)
