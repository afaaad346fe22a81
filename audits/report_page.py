"""The audit report as one self-contained HTML page (``audit report --out report.html``).

Built like review.html: no JavaScript, no network (a CSP that forbids both), inline SVG
charts (`audits.report_charts`), every value escaped. Unlike review.html it holds
statistics of private rows that are not differentially private, and says so at the top:
it stays in the enclave.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from audits.report_charts import Curve, heatmap, paired_bars, roc_chart
from selpe_audit.artifact.guarantees import tpr_bound
from selpe_audit.review.charts import escape_text as _e
from selpe_audit.review.markup import html_page
from selpe_audit.review.style import STYLE

_EXTRA_STYLE = """
header.enclave{display:flex;gap:18px;align-items:flex-start;background:#fdecea;
border-bottom:3px solid var(--bad);padding:18px 32px}
svg.chart .bar.real{fill:#9aa5b4}svg.chart .bar.syn{fill:var(--ok)}
svg.chart .hm{font-size:9.5px}svg.chart .rowlabel{font-size:11px}svg.chart .hm-none{fill:#f0f2f5}
svg.chart .frame{fill:#fff;stroke:#8a94a3}svg.chart .grid{stroke:#e7ebf0}
svg.chart .curve{fill:none;stroke-width:2}.curve.c0{stroke:var(--ok)}
.curve.c1{stroke:#7a5aa8}.curve.bound{stroke:var(--bad);stroke-dasharray:6 3}
.curve.chance{stroke:#8a94a3;stroke-dasharray:2 3;stroke-width:1}
.maps{display:grid;grid-template-columns:repeat(auto-fit,minmax(430px,1fr));gap:16px}
.fields{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:6px 22px}
"""


def _f(x: Any, digits: int = 3) -> str:
    return "-" if not isinstance(x, int | float) or isinstance(x, bool) else f"{x:.{digits}f}"


def _pct(x: Any) -> str:
    return "-" if not isinstance(x, int | float) else f"{100 * x:.1f} %"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Cells are already-escaped HTML."""
    h = "".join(f"<th>{c}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{_e(title)}</h2>{body}</section>'


def _chart(svg: str) -> str:
    return f'<div class="chartbox">{svg}</div>'


# ----- sections --------------------------------------------------------------------------

def _header(report: dict[str, Any]) -> str:
    return ('<header class="enclave"><div class="badge">ENCLAVE ONLY</div><div>'
            f"<h1>Audit report: {_e(report.get('dataset') or 'synthetic records')}</h1>"
            "<p><strong>This page holds statistics of the private rows (distributions, "
            "associations, attack scores) that are not differentially private.</strong> "
            "Keep it inside the enclave, like the rows it was computed from; it is never part "
            "of a release artifact. What leaves the enclave is the artifact alone.</p>"
            f'<p class="muted small">{_e(report["tool"])} · seed {_e(report["config"]["seed"])} · '
            f"{_e(report['elapsed_s'])} s</p></div></header>")


def _summary(r: dict[str, Any], art: dict[str, Any] | None) -> str:
    util = r["utility"]["models"]
    best = max(r["mia"]["attacks"].items(), key=lambda kv: kv[1]["roc_auc"])
    sd = r.get("sdmetrics", {})
    fields = r["fields"]
    tiles = [
        ("strictly valid records", _pct(r["validity"]["strict_valid"]),
         "good" if r["validity"]["strict_valid"] >= 0.99 else "bad"),
        ("mean 1-way TVD (lower is closer)",
         _f(sum(f["tvd"] for f in fields) / len(fields)), ""),
        ("TSTR, standard boosting: synthetic / real",
         f"{_f(util['hgb_native']['synthetic']['macro_auc'])} / "
         f"{_f(util['hgb_native']['real_sample']['macro_auc'])}", ""),
        (f"MIA ROC AUC ({best[0]}; 0.5 = chance)", _f(best[1]["roc_auc"]), ""),
    ]
    if sd.get("status") == "ok":
        tiles.append(("SDMetrics quality score", _pct(sd["score"]), ""))
    if art:
        tiles.append(("epsilon spent (artifact)", f"{art['epsilon']:.4g}", ""))
    body = "".join(f'<div class="tile {c}"><div class="tv">{_e(v)}</div>'
                   f'<div class="tl">{_e(t)}</div></div>' for t, v, c in tiles)
    worst = ", ".join(f"{f['field']} ({_f(f['tvd'])})" for f in fields[:3])
    return _section("summary", "Summary", f'<div class="tiles">{body}</div>'
                    f"<p>Fields the synthetic data gets most wrong (1-way TVD): {_e(worst)}.</p>")


def _guarantee(art: dict[str, Any] | None) -> str:
    if not art:
        return _section("guarantee", "The guarantee",
                        '<p class="muted">No artifact given (<code>--artifact</code>): no '
                        "guarantee to state and no DP bound to draw.</p>")
    how = ('<span class="st-verified">signature verified</span>' if art["verified"] else
           '<span class="st-unchecked">read unverified</span> (pass <code>--trust</code> '
           "with the release key to verify)")
    items = "".join(f"<li>{_e(s)}</li>" for s in art["statements"])
    return _section("guarantee", "The guarantee",
                    f"<p>From the ledger of <span class=\"mono\">{_e(art['path'])}</span> "
                    f"({how}): epsilon {_e(format(art['epsilon'], '.4g'))}, delta "
                    f"{_e(art['delta'])}.</p><ul>{items}</ul>")


def _validity(v: dict[str, Any]) -> str:
    rows = [[f'<span class="mono">{_e(name)}</span>',
             _e(", ".join(f"{k} ({n})" for k, n in reasons.items()))]
            for name, reasons in v["problems_by_field"].items()]
    body = (f"<p>{_e(_pct(v['rough_valid']))} of {_e(v['rows'])} synthetic rows are roughly "
            f"valid ({_e(v['definition']['rough'])}), {_e(_pct(v['strict_valid']))} strictly "
            f"({_e(v['definition']['strict'])}). Only strictly valid rows are compared "
            "below.</p>")
    if rows:
        body += _table(["field", "problems"], rows)
    return _section("validity", "Validity", body)


def _fields(r: dict[str, Any]) -> str:
    sd = {c["field"]: c for c in r.get("sdmetrics", {}).get("column_shapes", [])}
    overview = _table(
        ["field", "kind", "compared by", "1-way TVD", "SDMetrics column shape"],
        ([f'<span class="mono">{_e(f["field"])}</span>'
          + (' <span class="wk">label</span>' if f["is_label"] else ""),
          _e(f["kind"]), _e(f["basis"]), f'<span class="num">{_e(_f(f["tvd"]))}</span>',
          _e(f"{_f(sd[f['field']]['score'])} ({sd[f['field']]['metric']})")
          if f["field"] in sd else "-"] for f in r["fields"]))
    charts = []
    for f in r["fields"]:
        cats = f["categories"]
        charts.append(
            f'<div class="hist"><h4><span class="mono">{_e(f["field"])}</span> '
            f'<span class="muted small">TVD {_e(_f(f["tvd"]))} · {_e(f["basis"])}</span></h4>'
            + _chart(paired_bars(f"{f['field']}: real and synthetic shares",
                                 [c["category"] for c in cats], [c["real"] for c in cats],
                                 [c["synthetic"] for c in cats])) + "</div>")
    return _section("fields", "Fields: real and synthetic side by side",
                    "<p>Worst first. Shares of the real training rows and of the strictly valid "
                    "synthetic records in each public category.</p>" + overview
                    + f'<div class="fields">{"".join(charts)}</div>')


def _associations(a: dict[str, Any]) -> str:
    names = a["fields"]
    diff = [[None if (x := a["real"][i][j]) is None or (y := a["synthetic"][i][j]) is None
             else y - x for j in range(len(names))] for i in range(len(names))]
    pairs = sorted(((abs(d), names[i], names[j], a["real"][i][j], a["synthetic"][i][j])
                    for i in range(len(names)) for j in range(i + 1, len(names))
                    if (d := diff[i][j]) is not None), reverse=True)[:10]
    span = max([0.1, *(p[0] for p in pairs)])
    grid = "".join(f"<div><h4>{_e(t)}</h4>{_chart(svg)}</div>" for t, svg in (
        ("real", heatmap("Cramér's V, real", names, a["real"])),
        ("synthetic", heatmap("Cramér's V, synthetic", names, a["synthetic"])),
        ("synthetic − real", heatmap("Cramér's V, synthetic minus real", names, diff,
                                     domain=(-span, span), diverging=True))))
    table = _table(["pair", "real", "synthetic"],
                   ([f'<span class="mono">{_e(x)} × {_e(y)}</span>', _e(_f(rv)), _e(_f(sv))]
                    for _, x, y, rv, sv in pairs))
    return _section("associations", "Pairwise associations",
                    f"<p>{_e(a['measure'])}, shown × 100. Mean absolute difference "
                    f"{_e(_f(a['mean_abs_difference']))}. Red: the synthetic data makes a pair "
                    "more associated than the real data does; blue: less.</p>"
                    f'<div class="maps">{grid}</div><h3>Largest differences</h3>{table}')


def _utility(u: dict[str, Any]) -> str:
    from audits.utility import STANDARD

    names = list(u["models"])
    rows = [[f'<span class="mono">{_e(m)}</span>', _e("standard" if m in STANDARD else
                                                       "this project"),
             _e(u["features"].get(m, "")), _e(_f(v["synthetic"]["macro_auc"])),
             _e(_f(v["real_sample"]["macro_auc"])), _e(_f(v["gap"]))]
            for m, v in u["models"].items()]
    chart = paired_bars("TSTR: macro ROC AUC on real test rows", names,
                        [u["models"][m]["real_sample"]["macro_auc"] for m in names],
                        [u["models"][m]["synthetic"]["macro_auc"] for m in names],
                        fmt="num", domain=(0.5, 1.0),
                        names=("trained on real", "trained on synthetic"))
    s = u["sizes"]
    return _section("utility", "Train on synthetic, test on real",
                    f"<p>{_e(u['metric'])}; {_e(s['synthetic'])} training rows, the same "
                    f"number of real rows for the baseline, {_e(s['real_test'])} test rows.</p>"
                    + _chart(chart)
                    + _table(["model", "evaluator", "features", "synthetic", "real sample",
                              "gap"], rows))


def _people(p: dict[str, Any] | None) -> str:
    """Synthetic people against the real ones (a schema with person structure)."""
    if not p:
        return ""
    if "note" in p:
        return _section("people", "People", f"<p>{_e(p['note'])}</p>")
    v, g = p["visits"], p["gaps"]
    bars = ("<h3>Visits per person</h3>"
            + _chart(paired_bars("visits per person (share of people)", v["labels"], v["real"],
                                 v["synthetic"]))
            + "<h3>Gap to the next visit</h3>"
            + _chart(paired_bars("gap to the next visit (share of steps)", g["labels"],
                                 g["real"], g["synthetic"]))
            + "<h3>The next visit's label</h3>")
    maps = "".join(
        f"<div><h4>{_e(f)} &rarr; next, {_e(side)}</h4>"
        + _chart(heatmap(f"{f} -> next, {side}", t["rows"], t[side], columns=t["columns"]))
        + "</div>" for f, t in p["steps"].items() for side in ("real", "synthetic"))
    tvd = p["tvd"]
    rows = [[_e(k), _e(_f(x))] for k, x in tvd.items()]
    r, mia = p["return_tstr"], p["mia"]
    return _section("people", "People", (
        f"<p>Each person's first {_e(p['cap'])} visits in order (the last bar: that many or "
        f"more). Visits-per-person TVD {_e(_f(p['visits_tvd']))}; the next visit's label given "
        "each transition field (a row's shares, &times; 100), real and synthetic; the gap "
        "bins.</p>" + bars + f'<div class="maps">{maps}</div>'
        + "<h3>Transitions: TVD, synthetic against real</h3>" + _table(["step", "TVD"], rows)
        + "<h3>Return visits and people</h3>" + _table(["measure", "value"], [
            ["return-visit TSTR AUC (from the first visit, comes back?)",
             _e(f"{_f(r['synthetic'])} trained on synthetic people, {_f(r['real_sample'])} on "
                "as many real people")],
            ["C2ST AUC on per-person aggregates (0.5: indistinguishable)",
             _e(_f(p["c2st_auc"]))],
            ["person-level MIA (nearest synthetic person): AUC, advantage",
             _e(f"{_f(mia['auc'])}, {_f(mia['advantage'])} ({mia['members']} members, "
                f"{mia['non_members']} non-members)")]])))


def _text(u: dict[str, Any]) -> str:
    text = u.get("text") or {}
    if not text:
        return ""
    rows = []
    for name, q in text.items():
        t, near, div = q["tstr"], q["near_copies"], q["diversity"]
        rows.append([f'<span class="mono">{_e(name)}</span>',
                     _e(f"{_f(t['synthetic']['macro_auc'])} / "
                        f"{_f(t['real_sample']['macro_auc'])}"),
                     _e(f"{_pct(div['synthetic']['distinct_texts'])} / "
                        f"{_pct(div['real_sample']['distinct_texts'])}"),
                     _e(f"{_f(div['synthetic']['distinct_2'])} / "
                        f"{_f(div['real_sample']['distinct_2'])}"),
                     _e(_pct(near["exact_private"]["share"])),
                     _e(_pct(near["near_private"]["share"])),
                     _e(_pct(near["real_test_near_private"]["share"]))])
    return _section("text", "Free text",
                    "<p>Synthetic / real sample. Text TSTR: the text alone predicting the "
                    "label (TF-IDF + logistic regression). Near-copies: character n-gram "
                    "cosine to a private training text ≥ 0.9; real test texts near a training "
                    "text are the baseline (how often real texts repeat anyway).</p>"
                    + _table(["field", "text TSTR", "distinct texts", "distinct-2",
                              "exact copies", "near-copies", "real baseline"], rows))


def _mia(m: dict[str, Any]) -> str:
    bound = m.get("dp_bound")
    curves = [Curve(f"{name} attack", a["roc"]["fpr"], a["roc"]["tpr"], f"c{k % 2}")
              for k, (name, a) in enumerate(m["attacks"].items())]
    curves.append(Curve("chance", [0.0, 1e-3, 1.0], [0.0, 1e-3, 1.0], "chance"))
    if bound:
        grid = sorted({*np.geomspace(1e-4, 1.0, 120).tolist(), *np.linspace(0, 1, 41)})
        curves.append(Curve(f"DP bound, eps {bound['epsilon']:.3g}", grid,
                            [tpr_bound(bound["epsilon"], bound["delta"], f) for f in grid],
                            "bound"))
    charts = (_chart(roc_chart("membership inference ROC", curves))
              + _chart(roc_chart("membership inference ROC, log-log", curves, log=True)))
    fprs = [t["target_fpr"] for t in next(iter(m["attacks"].values()))["tpr_at_fpr"]]
    rows = []
    for name, a in m["attacks"].items():
        rows.append([_e(name), _e(f"{_f(a['roc_auc'])} [{_f(a['roc_auc_ci95'][0])}, "
                                  f"{_f(a['roc_auc_ci95'][1])}]"),
                     *(_e(_f(t["tpr"])) for t in a["tpr_at_fpr"]), _e(_f(a["advantage"]))])
    if bound:
        rows.append([_e("DP bound"), "", *(_e(f"≤ {b['tpr_max']:.4f}") for b in bound["tpr_max"]),
                     _e(f"≤ {bound['advantage_max']:.3f}")])
    verdict = ""
    if bound:
        bad = m.get("bound_violations") or []
        verdict = ("".join(f'<p class="bad">Exceeds the DP bound: {_e(v)}</p>' for v in bad)
                   if bad else '<p class="good">Within the DP bound at every FPR measured.</p>')
    ec = m["exact_copies"]
    s = m["sizes"]
    return _section("mia", "Membership inference",
                    f"<p>The attacker scores each target by its distance to the closest "
                    f"synthetic record; members: {_e(s['members'])} rows the release read, "
                    f"non-members: {_e(s['non_members'])} held-out rows. The dashed red curve "
                    "is the most any attack can reach under the artifact's (epsilon, delta).</p>"
                    f'<div class="maps">{charts}</div>'
                    + _table(["attack", "ROC AUC [95 % CI]",
                              *(f"TPR @ FPR {100 * f:g} %" for f in fprs), "advantage"], rows)
                    + verdict
                    + f"<p>Exact copies: {_e(_pct(ec['member_copy_rate']))} of synthetic records "
                    f"equal a member row (chance level, non-members: "
                    f"{_e(_pct(ec['non_member_copy_rate']))}).</p>")


def _sdmetrics(sd: dict[str, Any]) -> str:
    if sd.get("status") != "ok":
        return _section("sdmetrics", "SDMetrics quality report",
                        f'<p class="muted">{_e(sd.get("status"))}: {_e(sd.get("detail"))}</p>')
    props = "".join(f"<li>{_e(p)}: {_e(_pct(s))}</li>" for p, s in sd["properties"].items())
    pairs = sorted((p for p in sd["column_pairs"] if p["score"] is not None),
                   key=lambda p: p["score"])[:10]
    table = _table(["pair", "metric", "score"],
                   ([f'<span class="mono">{_e(" × ".join(p["fields"]))}</span>',
                     _e(p["metric"]), _e(_f(p["score"]))] for p in pairs))
    return _section("sdmetrics", "SDMetrics quality report (independent score)",
                    f"<p>SDMetrics {_e(sd['version'])}, single-table quality report on the "
                    f"numeric and categorical fields (free text has no SDMetrics quality "
                    f"metric): overall <strong>{_e(_pct(sd['score']))}</strong>.</p>"
                    f"<ul>{props}</ul><p>Column shapes are beside each field above. Weakest "
                    f"column pairs:</p>{table}")


def _inputs(report: dict[str, Any]) -> str:
    rows = ([_e(k), f'<span class="mono">{_e(v["path"])}</span>',
             f'<span class="mono small">{_e(v["sha256"])}</span>']
            for k, v in report["inputs"].items())
    return _section("inputs", "Inputs", _table(["role", "file", "SHA-256"], rows))


def render_report_html(report: dict[str, Any]) -> str:
    """The page for a report built by `audits.report.build_report` (with its envelope)."""
    r, art = report["result"], report.get("artifact")
    nav = [("summary", "Summary"), ("guarantee", "Guarantee"), ("validity", "Validity"),
           ("fields", "Fields"), ("associations", "Associations"), ("utility", "TSTR"),
           *([("text", "Text")] if r["utility"].get("text") else []),
           *([("people", "People")] if r.get("people") else []),
           ("mia", "Membership inference"), ("sdmetrics", "SDMetrics"), ("inputs", "Inputs")]
    body = (_summary(r, art) + _guarantee(art) + _validity(r["validity"]) + _fields(r)
            + _associations(r["associations"]) + _utility(r["utility"]) + _text(r["utility"])
            + _people(r.get("people")) + _mia(r["mia"]) + _sdmetrics(r.get("sdmetrics", {}))
            + _inputs(report))
    return html_page(
        f"selpe-audit report: {report.get('dataset') or ''} (enclave only)",
        STYLE + _EXTRA_STYLE, _header(report)
        + "<nav>" + "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav) + "</nav>"
        + f"<main>{body}</main><footer>Generated by selpe-audit audit report. Statistics of "
        "private rows, not DP: keep inside the enclave.</footer>")
