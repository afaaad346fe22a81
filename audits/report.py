"""``audit report``: every audit of a synthetic set in one place, for people to look at.

It runs the fidelity, utility (with the text metrics) and membership-inference audits on the
same rows, adds what they do not show - each field's real and synthetic distributions side
by side, the pairwise association matrices, ROC curves next to the curve the artifact's
(epsilon, delta) allows - and an independent standard score (SDMetrics' quality report, when
installed). `audits.report_page` draws the result as one self-contained HTML page.

Free text is compared by the public codebook the release published when the artifact is
given (its DP phrases or keywords, or its public topic anchors), else by word count. The
report holds statistics of private rows that are not differentially private: it stays in
the enclave, like every audit report.
"""

from __future__ import annotations

import argparse
import io
import itertools
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from audits import fidelity, mia, people, utility
from audits.io import (
    jsonable,
    load_embedder,
    load_record_schema,
    refuse_artifact_folder,
    subsample,
    write_report,
)
from audits.kinds import AuditKind, artifact_view, make_report, read_rows, register
from release.frame_source import FrameSource
from release.phrases import PhraseVocabulary
from release.private_data import InvalidPolicy, PrivateTable, read_private_rows
from release.topics import Codebook, assign_topics
from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.errors import UserError
from selpe_audit.kernel.private_text import TextEncoder
from selpe_audit.schema import Field, Schema, load_schema

Row = dict[str, Any]
#: Categories shown per field; the rest are pooled into one bar (high-cardinality text).
MAX_CATEGORIES = 16
OTHER = "(other)"


# ----- how each field is compared ----------------------------------------------------------

def text_coder(f: Field, view: ReleaseView | None,
               embedder: TextEncoder | None) -> tuple[str, Callable[[list[str]], list[str]]]:
    """How a free-text field's texts become categories: the artifact's public codebook (DP
    phrases or keywords: a text's first released term; public anchors: the nearest anchor,
    as the release assigns them), else the fidelity audit's word-count proxy."""
    topics = view.counts.topics.get(f.name) if view else None
    if topics is not None and topics.phrases is not None:
        vocab = PhraseVocabulary.from_record(f.name, topics.phrases)
        names = [*vocab.phrases, OTHER]  # topic j is phrase j; the last is "other"

        def by_term(texts: list[str]) -> list[str]:
            return [names[vocab.code(t)] for t in texts]
        return (f"released DP {vocab.kind} (a text's first released {vocab.kind[:-1]}; else "
                "other)", by_term)
    if topics is not None and topics.embeddings and embedder is not None:
        book = Codebook.from_record(f.name, topics)

        def by_anchor(texts: list[str]) -> list[str]:
            codes = assign_topics(book, texts, embedder)
            return [book.anchors[int(c)] for c in codes]
        return "nearest public topic anchor of the release", by_anchor
    return f"coarse proxy: {fidelity.TEXT_PROXY}", lambda texts: [
        fidelity.category(f, t) for t in texts]


def categorise(schema: Schema, rows: Sequence[Row], view: ReleaseView | None,
               embedder: TextEncoder | None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Every record field of every row as its public category, and how each was made."""
    cats: dict[str, list[str]] = {}
    basis: dict[str, str] = {}
    for f in schema.record_fields:
        if f.kind == "text":
            basis[f.name], code = text_coder(f, view, embedder)
            cats[f.name] = code(["" if r[f.name] is None else str(r[f.name]) for r in rows])
        else:
            basis[f.name] = "public bins of the schema" if f.kind == "numeric" else "value"
            cats[f.name] = [fidelity.category(f, r[f.name]) for r in rows]
    return cats, basis


def _order(f: Field, seen: Counter[str]) -> list[str]:
    """The categories in the schema's order (bins, enum), else by frequency."""
    if f.kind == "numeric":
        return list(f.bin_labels())
    if f.kind == "categorical":
        return [str(v) for v in f.enum]
    if all(name in {b[2] for b in fidelity.TEXT_BUCKETS} for name in seen):
        return [b[2] for b in fidelity.TEXT_BUCKETS]
    return [k for k, _ in seen.most_common()]


def field_distributions(schema: Schema, real: dict[str, list[str]], syn: dict[str, list[str]],
                        basis: dict[str, str]) -> list[dict[str, Any]]:
    """Per field: shares of each category, real and synthetic, and their TVD; worst first."""
    out = []
    for f in schema.record_fields:
        r, s = Counter(real[f.name]), Counter(syn[f.name])
        order = _order(f, r + s)
        if OTHER in order:  # "other" last
            order = [k for k in order if k != OTHER] + [OTHER]
        shown, pooled = order[:MAX_CATEGORIES], order[MAX_CATEGORIES:]
        nr, ns = max(1, len(real[f.name])), max(1, len(syn[f.name]))
        rows = [{"category": k, "real": r[k] / nr, "synthetic": s[k] / ns} for k in shown]
        if pooled:
            rows.append({"category": f"{len(pooled)} more",
                         "real": sum(r[k] for k in pooled) / nr,
                         "synthetic": sum(s[k] for k in pooled) / ns})
        tvd = 0.5 * sum(abs(r[k] / nr - s[k] / ns) for k in r.keys() | s.keys())
        out.append({"field": f.name, "kind": f.kind, "basis": basis[f.name],
                    "is_label": f.name == schema.label, "tvd": tvd, "categories": rows})
    return sorted(out, key=lambda d: -d["tvd"])


# ----- pairwise association -------------------------------------------------------------

def cramers_v(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cramér's V of two categorical samples (0: independent, 1: one determines the other);
    None when either has a single category."""
    ia = {k: i for i, k in enumerate(dict.fromkeys(a))}
    ib = {k: i for i, k in enumerate(dict.fromkeys(b))}
    if len(ia) < 2 or len(ib) < 2:
        return None
    table = np.zeros((len(ia), len(ib)))
    np.add.at(table, ([ia[x] for x in a], [ib[x] for x in b]), 1.0)
    n = table.sum()
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / n
    chi2 = float(((table - expected) ** 2 / expected).sum())
    return math.sqrt(chi2 / (n * (min(table.shape) - 1)))


def associations(schema: Schema, real: dict[str, list[str]],
                 syn: dict[str, list[str]]) -> dict[str, Any]:
    """Cramér's V of every field pair, real and synthetic (fields as their categories)."""
    names = [f.name for f in schema.record_fields]
    k = len(names)
    mats = {side: [[None] * k for _ in range(k)] for side in ("real", "synthetic")}
    for side, cats in (("real", real), ("synthetic", syn)):
        for i, j in itertools.combinations(range(k), 2):
            v = cramers_v(cats[names[i]], cats[names[j]])
            mats[side][i][j] = mats[side][j][i] = v
    pairs = [(mats["real"][i][j], mats["synthetic"][i][j])
             for i, j in itertools.combinations(range(k), 2)]
    diffs = [abs(a - b) for a, b in pairs if a is not None and b is not None]
    return {"measure": "Cramér's V over each field's categories (numbers by the schema's "
                       "bins, text by its codebook or word count)",
            "fields": names, **mats,
            "mean_abs_difference": float(np.mean(diffs)) if diffs else None}


# ----- the independent score --------------------------------------------------------------

def sdmetrics_quality(schema: Schema, real: Sequence[Row], syn: Sequence[Row]) -> dict[str, Any]:
    """SDMetrics' single-table quality report (column shapes, column pair trends) on the
    numeric and categorical fields; free text has no SDMetrics quality metric."""
    try:
        import pandas as pd

        with warnings.catch_warnings():  # its single-table module warns on import
            warnings.simplefilter("ignore", FutureWarning)
            from sdmetrics.reports.single_table import QualityReport
    except ImportError:
        return {"status": "not installed",
                "detail": "pip install 'selpe-audit[report]' (sdmetrics) to add it"}
    fields = [f for f in schema.record_fields if f.kind != "text"]
    if not fields:
        return {"status": "skipped", "detail": "no numeric or categorical field"}
    meta = {"columns": {f.name: {"sdtype": "numerical" if f.kind == "numeric" else "categorical"}
                        for f in fields}}

    def frame(rows: Sequence[Row]) -> Any:
        return pd.DataFrame({f.name: [r[f.name] if f.kind == "numeric" else str(r[f.name])
                                      for r in rows] for f in fields})

    report = QualityReport()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report.generate(frame(real), frame(syn), meta, verbose=False)
            shapes = report.get_details("Column Shapes")
            pairs = report.get_details("Column Pair Trends")
            props = report.get_properties()
    except Exception as e:  # an independent score that fails must not sink the report
        return {"status": "failed", "detail": f"{type(e).__name__}: {e}"}
    from importlib.metadata import version

    return {"status": "ok", "version": version("sdmetrics"),
            "score": float(report.get_score()),
            "properties": {str(p): float(s) for p, s in zip(props["Property"], props["Score"],
                                                          strict=True)},
            "column_shapes": [{"field": str(c), "metric": str(m), "score": float(s)}
                              for c, m, s in zip(shapes["Column"], shapes["Metric"],
                                                 shapes["Score"], strict=True)],
            "column_pairs": [{"fields": [str(a), str(b)], "metric": str(m),
                              "score": None if s != s else float(s)}
                             for a, b, m, s in zip(pairs["Column 1"], pairs["Column 2"],
                                                   pairs["Metric"], pairs["Score"],
                                                   strict=True)],
            "fields": [f.name for f in fields]}


# ----- the whole report ---------------------------------------------------------------------

def build_report(schema: Schema, syn_table: PrivateTable, real_train: Sequence[Row],
                 real_test: Sequence[Row], embedder: TextEncoder | None,
                 view: ReleaseView | None, *, seed: int = 0, max_targets: int = 2000,
                 use_sdmetrics: bool = True, progress: Callable[[str], Any] = print
                 ) -> dict[str, Any]:
    """Every statistic the page shows. ``real_train``: the rows the release read (the MIA's
    members); ``real_test``: held-out rows (its non-members, and utility's test set)."""
    syn = syn_table.priv_rows
    if not syn:
        raise ValueError("no strictly valid synthetic record to compare")
    progress("distributions and associations")
    cats_real, basis = categorise(schema, real_train, view, embedder)
    cats_syn, _ = categorise(schema, syn, view, embedder)
    out: dict[str, Any] = {
        "validity": fidelity.validity(syn_table),
        "fields": field_distributions(schema, cats_real, cats_syn, basis),
        "associations": associations(schema, cats_real, cats_syn),
    }
    progress("train on synthetic, test on real")
    out["utility"] = utility.run_utility(schema, syn, real_train, real_test, embedder, seed)
    progress("membership inference")
    members = subsample(list(real_train), max_targets, seed)
    non_members = subsample(list(real_test), max_targets, seed + 1)
    eps = delta = None
    if view is not None:
        eps, delta = view.ledger.total_epsilon, view.ledger.total_delta
    variants = ("kernel", "tfidf") if embedder is not None else ("tfidf",)
    out["mia"] = mia.run_mia(schema, syn, members, non_members,
                             mia.MiaConfig(variants=variants, seed=seed), embedder,
                             float(eps) if isinstance(eps, int | float) else None,
                             float(delta) if isinstance(delta, int | float) else 0.0)
    if use_sdmetrics:
        progress("SDMetrics quality report")
        out["sdmetrics"] = sdmetrics_quality(schema, real_train, syn)
    else:
        out["sdmetrics"] = {"status": "skipped", "detail": "--no-sdmetrics"}
    return out


def report_summary(doc: dict[str, Any]) -> Any:
    """The handful of numbers the terminal shows; the page has the rest."""
    from rich.table import Table

    r = doc["result"]
    t = Table(title="audit report (synthetic vs. real)")
    t.add_column("what")
    t.add_column("value")
    t.add_row("strictly valid records", f"{100 * r['validity']['strict_valid']:.1f} %")
    worst = r["fields"][0]
    t.add_row("mean 1-way TVD (worst field)",
              f"{np.mean([f['tvd'] for f in r['fields']]):.3f} ({worst['field']} "
              f"{worst['tvd']:.3f})")
    assoc = r["associations"]["mean_abs_difference"]
    if assoc is not None:
        t.add_row("pairwise Cramér's V, mean |difference|", f"{assoc:.3f}")
    for m in ("hgb_native", "tfidf_logreg"):
        x = r["utility"]["models"][m]
        t.add_row(f"TSTR {m}: synthetic vs real", f"{x['synthetic']['macro_auc']:.3f} vs "
                  f"{x['real_sample']['macro_auc']:.3f}")
    for name, q in (r["utility"].get("text") or {}).items():
        t.add_row(f"text TSTR {name}: synthetic vs real",
                  f"{q['tstr']['synthetic']['macro_auc']:.3f} vs "
                  f"{q['tstr']['real_sample']['macro_auc']:.3f}")
    bound = r["mia"].get("dp_bound")
    for name, a in r["mia"]["attacks"].items():
        tpr = a["tpr_at_fpr"][0]
        limit = f" (DP bound <= {bound['tpr_max'][0]['tpr_max']:.3f})" if bound else ""
        t.add_row(f"MIA {name}: AUC, TPR @ FPR {100 * tpr['target_fpr']:g} %",
                  f"{a['roc_auc']:.3f}, " + ("-" if tpr["tpr"] is None else f"{tpr['tpr']:.3f}")
                  + limit)
    sd = r.get("sdmetrics", {})
    t.add_row("SDMetrics quality score", f"{100 * sd['score']:.1f} %" if sd.get("status") == "ok"
              else str(sd.get("status")))
    return t


# ----- the ``selpe-audit audit report`` kind ---------------------------------------------

def _arguments(r: argparse.ArgumentParser) -> None:
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


@dataclass(frozen=True)
class Report:
    """An audit report: every number its page shows (statistics of private rows, not DP:
    keep it in the enclave).

    Attributes
    ----------
    doc : dict
        The report with its envelope (inputs, settings, time), as the JSON file holds it.
    """

    doc: dict[str, Any]

    @property
    def metrics(self) -> dict[str, Any]:
        """Every number of the page: validity, fields, associations, utility, mia,
        sdmetrics."""
        return self.doc["result"]

    @property
    def violates_bound(self) -> bool:
        """Whether a membership attack beat what the artifact's (epsilon, delta) allows."""
        return bool(self.metrics["mia"].get("bound_violations"))

    def write_html(self, path: str | Path) -> Path:
        """The page at ``path`` (.html) and every number beside it (.json); never into an
        artifact folder. Returns the page's path."""
        from audits.report_page import render_report_html

        out = Path(path)
        if out.suffix.lower() not in (".html", ".htm"):
            raise UserError(f"{out}: give an .html file for the page")
        refuse_artifact_folder(out)
        write_report(out.with_suffix(".json"), self.doc)
        try:
            atomic_write_bytes(out, render_report_html(jsonable(self.doc)).encode("utf-8"))
        except OSError as e:
            raise UserError(f"{out}: cannot write the report ({e.strerror})") from None
        return out

    def _repr_html_(self) -> str:
        return _summary_html(self.doc)


def audit_report(synthetic: Any, real_train: Any, real_test: Any,  # noqa: PLR0913 (the flags)
                 schema: str | Path, *,
                 artifact: str | Path | None = None, trust: Iterable[str | Path] = (),
                 seed: int = 0, max_targets: int = 2000, sdmetrics: bool = True,
                 embedder: str | None = None, invalid_rows: InvalidPolicy = "fail",
                 progress: bool = True) -> Report:
    """Every audit of a synthetic set against the real rows, as ``selpe-audit audit report``.

    Parameters
    ----------
    synthetic, real_train, real_test : path or DataFrame
        Synthetic records; the rows the release read (the MIA's members); held-out rows it
        did not read (TSTR's test set, the MIA's non-members). Files (.csv, .parquet,
        .jsonl) or polars/pandas DataFrames or pyarrow Tables.
    schema : path
        The dataset's JSON Schema.
    artifact : path, optional
        The release artifact: its guarantee, its DP bound on the ROC curves, its codebook.
    trust : paths
        Public keys to verify the artifact with (without: read unverified, and said so).
    seed, max_targets, sdmetrics, embedder, invalid_rows
        As the command's ``--seed``, ``--max-targets``, ``--no-sdmetrics``, ``--embedder``,
        ``--invalid-rows``.
    progress : bool
        Show the steps (on stderr).

    Raises
    ------
    UserError
        Bad input, in the command's one line.
    """
    t0 = time.perf_counter()
    trust = [trust] if isinstance(trust, str | Path) else list(trust)
    if trust and artifact is None:
        raise UserError("--trust verifies an artifact: pass --artifact too")
    if max_targets < 1:
        raise UserError("--max-targets must be at least 1")
    record_schema = load_record_schema(schema)
    view = artifact_view(str(artifact), [str(t) for t in trust]) if artifact else None
    syn_table = read_private_rows(_source(synthetic), record_schema, invalid="drop")
    train = read_rows(_source(real_train), record_schema, invalid_rows)
    test = read_rows(_source(real_test), record_schema, invalid_rows)
    encoder = _encoder(record_schema, embedder)
    console = Console(stderr=True, highlight=False, quiet=not progress)
    with console.status("audit report") as status:
        try:
            result = build_report(
                record_schema, syn_table, train, test, encoder, view, seed=seed,
                max_targets=max_targets, use_sdmetrics=sdmetrics,
                progress=lambda step: status.update(f"audit report: {step}"))
        except ValueError as e:
            raise UserError(f"{_name(synthetic)}: {e}") from None
    inputs = {"synthetic": synthetic, "real_train": real_train, "real_test": real_test,
              "schema": schema}
    config = {"seed": seed, "max_targets": max_targets,
              "embedder": embedder or "bundled default", "sdmetrics": sdmetrics}
    full = load_schema(schema)
    if full.persons is not None:
        result["people"] = _people(full, synthetic, real_train, real_test, view, seed)
    doc = make_report("report", inputs, config, result, t0)
    doc["dataset"] = view.dataset if view is not None else record_schema.name
    if view is not None:
        doc["artifact"] = _artifact_block(view, artifact, bool(trust))
    return Report(doc)


def _people(schema: Schema, synthetic: Any, real_train: Any, real_test: Any,
            view: ReleaseView | None, seed: int) -> dict[str, Any]:
    """The people section's numbers (`audits.people`), each person's first ``cap`` visits
    (the artifact's cap, else 3); a note when the synthetic records carry no person id
    (independent visits)."""
    try:
        syn, train, test = (read_private_rows(_source(x), schema, invalid="drop").frame
                            for x in (synthetic, real_train, real_test))
    except UserError:
        syn = train = test = None
    if syn is None or syn.is_empty() or train.is_empty() or test.is_empty():
        return {"note": f"the synthetic records carry no valid person id ({schema.id_field}):"
                        " they are independent visits (an artifact without people tables), "
                        "so there are no people to compare"}
    cap = view.persons.cap if view is not None and view.persons is not None else 3
    return people.people_report(syn, train, test, schema, cap, seed)


def _artifact_block(view: ReleaseView, artifact: Any, verified: bool) -> dict[str, Any]:
    """What the report says of the artifact whose bound and codebook it used."""
    return {"path": str(Path(artifact)), "verified": verified,
            "epsilon": view.ledger.total_epsilon, "delta": view.ledger.total_delta,
            "statements": list(view.guarantees.statements)}


def _encoder(schema: Schema, embedder: str | None) -> TextEncoder | None:
    """The embedder when the audits need one: utility embeds free text; the MIA's full
    kernel embeds text and the whole record."""
    needed = schema.by_kind("text") or mia.kernel_embeds(schema, None)
    return load_embedder(embedder) if needed else None


def _source(data: Any) -> Any:
    """A file path as given, or an in-memory table as the release's frame source."""
    return FrameSource.of(data) or data


def _name(data: Any) -> str:
    return str(_source(data))


def _summary_html(doc: dict[str, Any]) -> str:
    """The terminal's summary table as HTML (a notebook's display)."""
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(report_summary(doc))
    return console.export_html(inline_styles=True)


def _run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--out {out}: give an .html file for the page")
    refuse_artifact_folder(out)
    report = audit_report(args.synthetic, args.real_train, args.real_test, args.schema,
                          artifact=args.artifact, trust=args.trust, seed=args.seed,
                          max_targets=args.max_targets, sdmetrics=not args.no_sdmetrics,
                          embedder=args.embedder, invalid_rows=args.invalid_rows)
    report.write_html(out)
    con = Console(highlight=False)
    con.print(report_summary(report.doc))
    con.print(f"report: {out} (numbers: {out.with_suffix('.json')}); statistics of private "
              "rows, not DP: keep it in the enclave")
    return 1 if report.violates_bound else 0


AUDIT = register(AuditKind("report", "one HTML page: fidelity, TSTR, text, MIA vs. the DP "
                           "bound, SDMetrics", _arguments, _run, __doc__))
