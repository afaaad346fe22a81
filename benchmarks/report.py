"""RESULTS.md as a page a person reads in two minutes, from RESULTS.json (the raw numbers).

Per benchmark: one line saying how and when it ran, its one-line ``summary`` and one short
markdown ``table`` - the result's own where it gives them, else a compact one written here
from its JSON - and links to SVG plots written to ``plots/`` beside the page. No JSON in
the page: every number stays in RESULTS.json.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.svg import bar_chart, line_chart

Result = dict[str, Any]
Plot = tuple[str, str, str]  # (file stem, caption, svg text)


def _f(x: Any, places: int = 3) -> str:
    return "-" if x is None else f"{x:.{places}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(str(c) for c in r) + " |" for r in rows)])


# ----- compact tables and summaries for results that carry none -----------------------------

def _counts_table(r: Result) -> str:
    return _table(("rows", "polars (s)", "OpenDP (s)", "handoff / queries (s)", "ratio",
                   "peak MiB polars / OpenDP"),
                  [(f"{r['rows']:,}", _f(r["polars_s"], 2), _f(r["opendp_s"], 2),
                    f"{r['opendp_handoff_s']:.2f} / {r['opendp_queries_s']:.2f}",
                    f"{r['time_ratio']:.1f}x",
                    f"{r['polars_peak_mib']:.0f} / {r['opendp_peak_mib']:.0f}")])


def _counts_summary(r: Result) -> str:
    return (f"OpenDP counts take {r['time_ratio']:.1f}x plain polars on {r['rows']:,} rows "
            f"(queries alone {r['queries_ratio']:.1f}x; target {r['target_ratio']:g}x).")


def _selection_table(r: Result) -> str:
    c = r["cost"]
    return _table(("batches", "candidates", "utilities (s)", "noisy max (s)", "round (s)",
                   "featurize all candidates (s, est.)"),
                  [(c["batches"], f"{c['candidates']:,}", _f(c["utilities_s"]),
                    _f(c["noisy_max_s"]), _f(c["round_s"]),
                    f"{c['featurize_m_candidates_s_est']:.0f}")])


def _selection_summary(r: Result) -> str:
    beat = "beat" if r.get("winners_at_inf_beat_random") else "do not beat"
    distances = ", ".join(f"{k if k == 'random' else f'eps {k}'} {_f(v)}"
                          for k, v in r["signal_mean_distance"].items())
    return (f"One selection round over {r['cost']['candidates']:,} candidates takes "
            f"{r['cost']['round_s']:.2f} s; winners at eps = inf {beat} random candidates "
            f"(winners' mean distance to the private rows: {distances}).")


def _decode_table(r: Result) -> str:
    steps = ("none", "select_top", "fit", "select_top+fit")
    rows = []
    for dec in ("marginals", "model", "llm", "llm-whole-records"):
        d = r.get(dec)
        if d:
            rate = d["records_per_s"]
            share = d.get("distinct_text_share")
            rows.append((dec, f"{rate:,.0f}" if rate >= 100 else f"{rate:.2f}",
                         f"{d['validity']:.0%}", "-" if share is None else f"{share:.0%}",
                         *(_f(d["fidelity"][s]["tvd_histograms"]) for s in steps)))
    return _table(("decoder", "records/s", "valid", "distinct texts",
                   *(f"TVD hist. {s}" for s in steps)), rows)


def _decode_summary(r: Result) -> str:
    m, llm = r["marginals"], r["llm"]

    def fit(d: Result) -> str:
        f = d["fidelity"]
        return f"{f['none']['tvd_histograms']:.3f} -> {f['fit']['tvd_histograms']:.3f}"

    rep = r.get("speedup_repeats")
    pairs = (f"; median of {len(rep['ratios'])} more pairs {rep['median']:.2f}x"
             if rep else "")
    speed = (f" (hybrid: fields from the model, LLM text only: {r['hybrid_speedup']:.2f}x the "
             f"whole-record decoder's {r['llm-whole-records']['records_per_s']:.2f}{pairs})"
             if "hybrid_speedup" in r else "")
    return (f"{r['n']} rows: marginals decoder {m['records_per_s']:,.0f} records/s, LLM "
            f"{llm['records_per_s']:.2f} records/s{speed}; the fit takes histogram TVD "
            f"{fit(m)} (marginals), {fit(llm)} (LLM).")


def _generation_table(r: Result) -> str:
    return _table(("", "unconstrained", "grammar-constrained", "ratio"), [
        ("tokens/s, 4 parallel", f"{r['unconstrained_tokens_per_s']:.1f}",
         f"{r['constrained_tokens_per_s']:.1f}", f"{r['ratio']:.2f}"),
        ("tokens/s, 1 sequence", f"{r['one_sequence_unconstrained_tokens_per_s']:.1f}",
         f"{r['one_sequence_constrained_tokens_per_s']:.1f}", f"{r['one_sequence_ratio']:.2f}"),
        ("naive JSON schema tokens/s", "", f"{r['naive_json_schema_tokens_per_s']:.1f}",
         f"{r['naive_ratio']:.2f}"),
        ("records/s (constrained / fast-forward)", "",
         f"{r['constrained_records_per_s']:.2f} / {r['fast_forward_records_per_s']:.2f}", ""),
        ("validity %", "", f"{r['constrained_validity_pct']:.0f}", "")])


def _generation_summary(r: Result) -> str:
    return (f"{r['model']} on {r['cpus']} CPUs: grammar-constrained decoding runs at "
            f"{r['ratio']:.2f}x unconstrained speed, {r['constrained_validity_pct']:.0f} % "
            "valid records.")


def _selection_modes_table(r: Result) -> str:
    """The largest n per class only (the full grid is in RESULTS.json), plus the cost."""
    summary = r["summary"]
    n = max(s["n"] for s in summary)
    modes = [m for m in ("selpe", "pe-histogram", "representatives", "random", "real")
             if m in summary[0]]
    rows = [(s["epsilon"], *(f"{s[m]['auc_tfidf']:.3f} / {s[m]['tvd_1way']:.3f}" for m in modes))
            for s in summary if s["n"] == n]
    cost = r["cost"]
    return "\n\n".join([
        f"n = {n} per class; each cell TSTR AUC (TF-IDF LR) / mean 1-way TVD:",
        _table(("epsilon", *modes), rows),
        _table(("mode", "round (s)", "x selpe"),
               [(m, f"{cost[m]['round_s']:.2f}", f"{cost[m]['x_selpe']:.1f}")
                for m in ("selpe", "pe-histogram", "representatives") if m in cost])])


def _selection_modes_summary(r: Result) -> str:
    c, summary = r["cost"], r["summary"]
    n = max(s["n"] for s in summary)
    best = max(((s[m]["auc_tfidf"], m, s["epsilon"]) for s in summary if s["n"] == n
                for m in ("selpe", "pe-histogram", "representatives")), default=None)
    real = next(s["real"]["auc_tfidf"] for s in summary if s["n"] == n)
    return (f"pe-histogram costs {c['pe-histogram']['x_selpe']:.0f}x and representatives "
            f"{c['representatives']['x_selpe']:.1f}x a selpe round on "
            f"{c['private_rows']:,} rows; at n = {n} per class the best TSTR AUC is "
            f"{best[0]:.3f} ({best[1]}, eps {best[2]:g}) against {real:.3f} for real rows.")


def _triage_summary(r: Result) -> str:
    by = {x["epsilon"]: x for x in r["main"]}
    x = by.get(2.0) or r["main"][0]
    u = x["utility"]["tfidf_logreg"]
    return (f"Default pipeline at eps {x['epsilon']}: TSTR LR {_f(u['synthetic'])} vs real "
            f"{_f(u['real_sample'])}, 1-way TVD {_f(x['tvd_1way'])}, MIA AUC "
            f"{_f(x['mia']['kernel']['roc_auc'])}.")


def _database_summary(r: Result) -> str:
    return (f"Reading {r['rows']:,} rows from PostgreSQL takes {r['ratio']:.2f}x the CSV "
            "read (validation included).")


def _audits_summary(r: Result) -> str:
    right = "every verdict right" if r.get("all_verdicts_right") else "SOME VERDICTS WRONG"
    return f"Each mechanism audit at the right and a 2x-off calibration: {right}."


def _audits_table(r: Result) -> str:
    """One row per audit: its right and its 2x-off calibration side by side."""
    def cell(x: Result) -> str:
        parts = [f"eps_LB {_f(x['eps_lb'])}"]
        if x.get("mu_estimate"):
            parts.append(f"mu {_f(x['mu_estimate'])} ({_f(x['mu_claimed'])})")
        if x.get("counts_epsilon_lower") is not None:
            parts.append(f"counts eps lower {_f(x['counts_epsilon_lower'])}")
        verdict = "pass" if x["passed"] else "FLAGGED"
        return f"{', '.join(parts)}: {verdict}{'' if x['verdict_right'] else ' (WRONG)'}"
    by = {(x["audit"], x["calibration"]): x for x in r["rows"]}
    audits = list(dict.fromkeys(x["audit"] for x in r["rows"]))
    return _table(("audit", "claimed eps", "right calibration", "2x-off calibration"),
                  [(a, f"{by[(a, 'right')]['claimed_epsilon']:g}", cell(by[(a, "right")]),
                    cell(by[(a, "2x")])) for a in audits])


def _counts_modes_table(r: Result) -> str:
    from benchmarks import counts_modes_report  # its own table, rendered anew: the stages moved

    return counts_modes_report.table(r)


TABLES: dict[str, Callable[[Result], str]] = {
    "counts_modes": _counts_modes_table,  # release stages now in scale: one line here
    "counts": _counts_table, "selection": _selection_table, "decode": _decode_table,
    "generation": _generation_table,
    "selection_modes": _selection_modes_table,  # its own table is the full 12-row grid, twice
    "audits": _audits_table,  # its own table is a row per calibration
}
SUMMARIES: dict[str, Callable[[Result], str]] = {
    "counts": _counts_summary, "selection": _selection_summary, "decode": _decode_summary,
    "generation": _generation_summary, "selection_modes": _selection_modes_summary,
    "triage": _triage_summary,
    "database": _database_summary, "audits": _audits_summary,
}


# ----- plots ---------------------------------------------------------------------------------

def _eps(x: Any) -> str:
    return x if isinstance(x, str) else f"{x:g}"


def _triage_plots(r: Result) -> list[Plot]:
    xs = [_eps(x["epsilon"]) for x in r["main"]]
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


def _counts_modes_plots(r: Result) -> list[Plot]:
    a = r.get("adult", {})
    runs = [x for x in a.get("runs", []) if "models" in x]
    if not runs:
        return []
    eps = a["epsilons"]
    modes = [m for m in a["modes"] if any(x["mode"] == m for x in runs)]
    at = {(x["mode"], x["epsilon"]): x for x in runs}
    plots = []
    for name, (lr, gb), ref in (
            ("standard", ("onehot_logreg", "hgb_native"),
             (r["targets"]["adult_eps2_gap_gb_standard"], "GB target at eps 2")),
            ("today", ("tfidf_logreg", "hgb_embeddings"),
             (r["targets"]["cortec_gap_eps2"], "CoRTeC at eps 2"))):
        series, color_of = {}, {}
        for i, m in enumerate(modes):
            for short, model in (("LR", lr), ("GB", gb)):
                series[f"{m} {short}"] = [at[m, e]["models"][model]["gap"]
                                          if (m, e) in at else None for e in eps]
                color_of[f"{m} {short}"] = i
        plots.append((f"gap-{name}", f"Adult TSTR gap vs epsilon per mode, {name} evaluator",
                      line_chart(f"Adult TSTR gap per counts mode ({name} evaluator)",
                                 [_eps(e) for e in eps], series, "gap (real - synthetic AUC)",
                                 reference=ref, width=640, color_of=color_of,
                                 dashed=[k for k in series if k.endswith(" GB")])))
    e2 = 2.0 if any(x["epsilon"] == 2.0 for x in runs) else runs[0]["epsilon"]
    fields = list(next(x for x in runs if x["epsilon"] == e2)["tvd_per_field"])
    series = {m: [at[m, e2]["tvd_per_field"].get(f) if (m, e2) in at else None
                  for f in fields] for m in modes}
    plots.append(("tvd", f"1-way TVD per field at epsilon {_eps(e2)}",
                  bar_chart(f"Adult, 1-way TVD per field at epsilon {_eps(e2)}", fields,
                            series, "TVD to the training rows")))
    return plots


def _scale_plots(r: Result) -> list[Plot]:
    rows = r["rows"]
    series = {"plain read": [x["plain_read"]["seconds"] for x in rows],
              "read+check": [x["release"]["read_check_s"] for x in rows],
              "counts": [x["release"]["counts_s"] for x in rows],
              "release": [x["release"]["seconds"] for x in rows],
              "decode (model)": [x.get("decode", {}).get("seconds") for x in rows]}
    logged = {k: [math.log10(v) if v else None for v in vs] for k, vs in series.items()}
    svg = line_chart("Seconds against rows (log-log)", [f"1e{round(math.log10(x['n']))}"
                                                          for x in rows],
                     logged, "log10 seconds", width=640)
    return [("seconds", "Seconds per stage against N, log-log", svg)]


def _small_tables_plots(r: Result) -> list[Plot]:
    from benchmarks.small_tables import plots
    return plots(r)


PLOTS: dict[str, Callable[[Result], list[Plot]]] = {
    "triage": _triage_plots, "counts_modes": _counts_modes_plots,
    "scale": _scale_plots, "small_tables": _small_tables_plots,
}


# ----- the page ------------------------------------------------------------------------------

def _one_line(text: str) -> str:
    return " ".join(text.split())


def _machine(entries: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """(the machine every section shares, without the commit; the range of dates)."""
    machines = {re.sub(r",? commit \w+$", "", e.get("machine", "")) for e in entries.values()}
    dates = sorted(e.get("date", "") for e in entries.values())
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return "; ".join(sorted(machines)), span


def section(name: str, entry: dict[str, Any], plots: list[tuple[str, str]]) -> list[str]:
    """The lines of one benchmark's section (``plots``: (caption, relative path))."""
    r = entry["result"]
    commit = re.search(r"commit (\w+)", entry.get("machine", ""))
    lines = [f"## {name}", "",
             f"`{entry['command']}` · {entry['date']} · {entry['seconds']:.0f} s"
             + (f" · commit {commit.group(1)}" if commit else ""), ""]
    if "retired" in entry:  # a decided study: its code is gone, its last numbers stay
        lines += [f"**Retired** {_one_line(entry['retired'])}.", ""]
    if "error" in r:
        return [*lines, f"**Failed:** {_one_line(str(r['error']))}", ""]
    if "last_failure" in entry:
        f = entry["last_failure"]
        lines += [f"**The last run failed** ({f['date']}): {_one_line(str(f['error']))}; the "
                  "numbers below are from the run before.", ""]
    summary = r.get("summary") if isinstance(r.get("summary"), str) else None
    if summary is None and name in SUMMARIES:
        try:
            summary = SUMMARIES[name](r)
        except (KeyError, TypeError, ValueError, IndexError):
            summary = None
    if summary:
        lines += [_one_line(summary), ""]
    table = None
    if name in TABLES:
        try:
            table = TABLES[name](r)
        except (KeyError, TypeError, ValueError, IndexError):
            table = None
    if table is None and isinstance(r.get("table"), str):
        table = r["table"]
    if table:
        lines += [table.strip(), ""]
    if plots:
        lines += [" ".join(f"![{c}]({p})" for c, p in plots), ""]
    return lines


def write_page(path: Path, entries: dict[str, dict[str, Any]], order: Sequence[str]) -> None:
    """RESULTS.md at ``path`` and its plots in ``path.parent / "plots"``."""
    plot_dir = path.parent / "plots"
    machine, span = _machine(entries) if entries else ("", "")
    names = [n for n in order if n in entries] + [n for n in entries if n not in order]
    lines = ["# Benchmark results", "",
             f"Measured on {machine}, {span}. Regenerate with `python -m benchmarks` (every "
             "benchmark), `--only NAME[,NAME]` (some) or `--render` (this page and its plots "
             "from RESULTS.json, no run). Generated: do not edit by hand. Every number, "
             "including those not shown here, is in [RESULTS.json](RESULTS.json).", "",
             "Sections: " + ", ".join(f"[{n}](#{n})" for n in names), ""]
    for name in names:
        links = []
        if "error" not in entries[name]["result"] and name in PLOTS:
            try:
                made = PLOTS[name](entries[name]["result"])
            except (KeyError, TypeError, ValueError, IndexError):
                made = []
            for stem, caption, svg in made:
                plot_dir.mkdir(parents=True, exist_ok=True)
                (plot_dir / f"{name}-{stem}.svg").write_text(svg + "\n", encoding="utf-8")
                links.append((caption, f"plots/{name}-{stem}.svg"))
        lines += section(name, entries[name], links)
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def write_results(path: Path, entries: dict[str, dict[str, Any]], order: Sequence[str]) -> None:
    """RESULTS.json beside ``path``, then the page at ``path`` rendered from it (sections in
    ``order``, then any others)."""
    path.with_suffix(".json").write_text(json.dumps(entries, indent=2, default=str) + "\n")
    write_page(path, entries, order)
