"""``review.html``: one self-contained page a reviewer can open anywhere, even offline.

Everything on the page is derived from ``release.json`` and the page itself is not
trusted. So it must be safe to open whatever the artifact holds: every text from the
artifact goes through `_e` (HTML escaping, quotes included, control characters made
visible), the page has no JavaScript and a Content-Security-Policy that forbids scripts
and any network access, and the charts are inline SVG drawn here.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selpe_audit.artifact.document import read_release_unverified
from selpe_audit.artifact.canonical import atomic_write_bytes, canonical_bytes
from selpe_audit.errors import UserError
from selpe_audit.review.view import (
    EPSILON_HIGH,
    ReviewWarning,
    SignatureStatus,
    as_dict,
    as_list,
    cell_label,
    class_labels,
    count_flag,
    count_floor,
    display_text,
    exemplars,
    fmt_value,
    noise_scales,
    personal_data_hits,
    record_layout,
    review_warnings,
    signature_warnings,
)

REVIEW_FILE = "review.html"
_KNOWN_COUNTS = {"class_balance", "histograms", "cohorts", "rates", "signed"}
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'"


def _e(value: Any) -> str:
    """Escape any artifact text for HTML text and attribute values alike."""
    return html.escape(display_text(value), quote=True)


def _short(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, float) else fmt_value(x)


def _json(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, sort_keys=True)


# ----- SVG bar charts --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Cell:
    value: float | None  # None draws no bar (a suppressed rate)
    text: str
    css: str = "ok"
    note: str = ""


@dataclass(frozen=True)
class _Column:
    header: str
    cells: list[_Cell]
    domain: tuple[float, float] | None = None  # None: shared with the other such columns


@dataclass
class _Chart:
    """Horizontal bars: one row per public key, one small chart per column (class)."""

    title: str
    rows: list[str]
    columns: list[_Column]

    ROW_H = 22
    HEAD_H = 30
    COL_W = 190
    VALUE_W = 58
    MAX_LABEL = 34

    def __post_init__(self) -> None:
        """A malformed block with more counts than keys still shows every count."""
        n = max([len(self.rows), *(len(c.cells) for c in self.columns)])
        self.rows = self.rows + ["(no key)"] * (n - len(self.rows))

    def svg(self) -> str:
        labels = [r if len(r) <= self.MAX_LABEL else r[: self.MAX_LABEL - 1] + "…"
                  for r in self.rows]
        label_w = min(260, max(140, 7 * max((len(x) for x in labels), default=4) + 18))
        width = label_w + self.COL_W * max(1, len(self.columns)) + 8
        height = self.HEAD_H + self.ROW_H * len(self.rows) + 8
        shared = _domain(c.value for col in self.columns if col.domain is None
                         for c in col.cells)
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
                 f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
                 f'aria-label="{_e(self.title)}"><title>{_e(self.title)}</title>']
        for i, (label, full) in enumerate(zip(labels, self.rows, strict=True)):
            y = self.HEAD_H + i * self.ROW_H
            if i % 2 == 0:
                parts.append(f'<rect class="stripe" x="0" y="{y}" width="{width}" '
                             f'height="{self.ROW_H}"/>')
            parts.append(f'<text class="rowlabel" x="{label_w - 8}" y="{y + 15}" '
                         f'text-anchor="end"><title>{_e(full)}</title>{_e(label)}</text>')
        for j, col in enumerate(self.columns):
            parts.append(self._column(col, label_w + j * self.COL_W, col.domain or shared))
        parts.append("</svg>")
        return "".join(parts)

    def _column(self, col: _Column, x0: int, domain: tuple[float, float]) -> str:
        lo, hi = domain
        bar_w = self.COL_W - self.VALUE_W - 16

        def x(v: float) -> float:
            return x0 + 8 + (v - lo) / (hi - lo) * bar_w

        bottom = self.HEAD_H + self.ROW_H * len(self.rows)
        out = [f'<line class="sep" x1="{x0}" y1="4" x2="{x0}" y2="{bottom}"/>',
               f'<text class="colhead" x="{x0 + self.COL_W / 2:.1f}" y="19" '
               f'text-anchor="middle">{_e(col.header)}</text>',
               f'<line class="zero" x1="{x(0):.1f}" y1="{self.HEAD_H - 4}" x2="{x(0):.1f}" '
               f'y2="{bottom}"/>']
        for i, c in enumerate(col.cells):
            y = self.HEAD_H + i * self.ROW_H
            tip = f"{col.header} · {self.rows[i]}: {c.text}"
            if c.note:
                tip += f" ({c.note})"
            out.append(f"<g><title>{_e(tip)}</title>")
            if c.value is not None:
                a, b = sorted((x(0), x(c.value)))
                out.append(f'<rect class="bar {c.css}" x="{a:.1f}" y="{y + 4}" '
                           f'width="{max(b - a, 1.0):.1f}" height="{self.ROW_H - 8}" rx="2"/>')
            out.append(f'<text class="val {c.css}" x="{x0 + self.COL_W - 8}" y="{y + 15}" '
                       f'text-anchor="end">{_e(c.text)}</text></g>')
        return "".join(out)


def _domain(values: Iterable[float | None]) -> tuple[float, float]:
    vs = [v for v in values if v is not None]
    lo, hi = min([0.0, *vs]), max([0.0, *vs])
    return (lo, hi) if hi > lo else (0.0, 1.0)


def _count_cell(value: Any, floor: int, scale: float | None) -> _Cell:
    v = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    flag = count_flag(value, floor, scale)
    css = "ok" if not flag else ("neg" if flag == "negative" else "low")
    return _Cell(float(v) if v is not None else None, fmt_value(value), css, flag or "")


def _count_chart(doc: dict[str, Any], title: str, rows: list[str], mechanism_id: Any,
                 columns: list[tuple[str, list[Any]]]) -> str:
    floor = count_floor(doc)
    scale = noise_scales(doc).get(mechanism_id) if isinstance(mechanism_id, str) else None
    chart = _Chart(title, rows, [_Column(h, [_count_cell(v, floor, scale) for v in vals])
                                 for h, vals in columns])
    return f'<div class="chartbox">{chart.svg()}</div>'


# ----- page sections --------------------------------------------------------------------------

def _table(head: list[str], rows: Iterable[list[str]], cls: str = "") -> str:
    """Cells are already-escaped HTML."""
    h = "".join(f"<th>{c}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(fmt_value(v))}</td></tr>" for k, v in pairs)
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{title}</h2>{body}</section>'


def _header(doc: dict[str, Any]) -> str:
    try:
        sha = hashlib.sha256(canonical_bytes(doc)).hexdigest()
    except ValueError:
        sha = "(not computable: the document is not canonical JSON)"
    return (
        '<header class="untrusted"><div class="badge">NOT TRUSTED</div><div>'
        f"<h1>Review: {_e(doc.get('dataset', '(no dataset name)'))}</h1>"
        "<p><strong>This page is derived from <code>release.json</code> and is not itself "
        "trusted.</strong> It is not signed and anyone could have edited it. Only "
        "<code>release.json</code> and its signatures count: check them with "
        "<code>selpe-audit review ARTIFACT --trust KEY.pub.pem</code> (or stock OpenSSL) "
        "before you approve or decode.</p>"
        f'<p class="mono">release.json SHA-256 (canonical bytes): {_e(sha)}</p></div></header>')


def _nav(has_selection: bool, n_warnings: int) -> str:
    items = [("summary", "Summary"), ("signatures", "Signatures"),
             ("warnings", f"Warnings ({n_warnings})"), ("guarantees", "Guarantees"),
             ("ledger", "Ledger"), ("counts", "Noisy counts")]
    if has_selection:
        items.append(("selection", "Exemplars"))
    items.append(("schema", "Schema"))
    return "<nav>" + "".join(f'<a href="#{a}">{t}</a>' for a, t in items) + "</nav>"


def _summary(doc: dict[str, Any]) -> str:
    ledger, budget = as_dict(doc.get("ledger")), as_dict(doc.get("budget"))
    guar = as_dict(doc.get("guarantees"))
    eps = ledger.get("total_epsilon")
    high = isinstance(eps, int | float) and eps > EPSILON_HIGH
    tiles = [("epsilon spent", _short(eps), "bad" if high else "good"),
             ("delta", _short(ledger.get("total_delta")), ""),
             ("membership advantage ≤", _short(guar.get("membership_advantage_max")), ""),
             ("mechanisms", str(len(as_list(ledger.get("entries")))), "")]
    tile_html = "".join(f'<div class="tile {c}"><div class="tv">{_e(v)}</div>'
                        f'<div class="tl">{_e(k)}</div></div>' for k, v, c in tiles)
    unit = as_dict(doc.get("privacy_unit"))
    about = _kv([("dataset", doc.get("dataset")), ("created", doc.get("created")),
                 ("format", f"{doc.get('format')} v{doc.get('format_version')}"),
                 ("schema SHA-256", doc.get("schema_sha256")),
                 ("release key id", doc.get("release_key_id")),
                 *((f"privacy unit: {k}", v) for k, v in unit.items())])
    split = as_dict(budget.get("split"))
    bud = _kv([("total epsilon", budget.get("epsilon")), ("delta", budget.get("delta")),
               *((f"share: {k}", v) for k, v in split.items()),
               *((f"counts: {k}", v) for k, v in as_dict(budget.get("counts")).items()),
               *((k, v) for k, v in budget.items()
                 if k not in {"epsilon", "delta", "split", "counts"})])
    tools = _kv(sorted(as_dict(doc.get("tool")).items()))
    return _section("summary", "Summary",
                    f'<div class="tiles">{tile_html}</div><div class="grid3">'
                    f"<div><h3>Release</h3>{about}</div><div><h3>Budget</h3>{bud}</div>"
                    f"<div><h3>Tool and library versions</h3>{tools}</div></div>")


def _signatures(statuses: list[SignatureStatus] | None) -> str:
    if statuses is None:
        body = ('<p class="muted">Signatures were not checked when this page was written. '
                "Run <code>selpe-audit review ARTIFACT --trust KEY.pub.pem</code>.</p>")
    elif not statuses:
        body = '<p class="bad">No signature files in <code>signatures/</code>.</p>'
    else:
        body = ("<p>As checked when this page was written, against the keys passed with "
                "<code>--trust</code>. Check again yourself: this page is not trusted.</p>"
                + _table(["key id", "role", "status", "meaning"],
                         ([f'<span class="mono">{_e(s.key_id)}</span>',
                           "release key" if s.is_release_key else "reviewer (approval)",
                           f'<span class="st-{_e(s.status.lower())}">{_e(s.status)}</span>',
                           _e(s.detail)] for s in statuses)))
    return _section("signatures", "Signatures", body)


def _warnings(warnings: list[ReviewWarning]) -> str:
    if not warnings:
        return _section("warnings", "Warnings", '<p class="good">No warnings.</p>')
    by_kind: dict[str, list[ReviewWarning]] = {}
    for w in warnings:
        by_kind.setdefault(w.kind, []).append(w)
    parts = ['<p class="counts-by-kind">' + " ".join(
        f'<span class="wk">{_e(k)}: {len(ws)}</span>' for k, ws in by_kind.items()) + "</p>"]
    for kind, ws in by_kind.items():
        table = _table(["where", "reason"], ([_e(w.where), _e(w.reason)] for w in ws), "warn")
        if kind == "small counts":
            parts.append(f"<details><summary>{len(ws)} series with small, negative or "
                         "noise-dominated counts (expected under DP noise; decoders clamp at 0; "
                         "also marked in the charts)</summary>" + table + "</details>")
        else:
            parts.append(f"<h3>{_e(kind)}</h3>{table}")
    return _section("warnings", f"Warnings ({len(warnings)})",
                    "<p>Each rule only flags; a reviewer decides.</p>" + "".join(parts))


def _guarantees(doc: dict[str, Any]) -> str:
    g = as_dict(doc.get("guarantees"))
    words = "".join(f"<li>{_e(s)}</li>" for s in as_list(g.get("statements")))
    nums = [("epsilon", g.get("epsilon")), ("delta", g.get("delta")),
            ("membership advantage max", g.get("membership_advantage_max"))]
    nums += [(f"membership TPR max at FPR {fmt_value(as_dict(t).get('fpr'))}",
              as_dict(t).get("tpr_max")) for t in as_list(g.get("membership_tpr_max"))]
    nums += [(f"reconstruction success max at prior {fmt_value(as_dict(r).get('prior'))}",
              as_dict(r).get("success_max"))
             for r in as_list(g.get("reconstruction_success_max"))]
    gdp = as_dict(g.get("selection_gdp"))
    if gdp:
        words += "".join(f"<li>{_e(s)}</li>" for s in as_list(gdp.get("statements")))
        words += f'<li class="muted">{_e(gdp.get("note"))}</li>'
        nums.append(("selection mu (GDP)", gdp.get("mu")))
        nums += [(f"selection (p, r): r at prior {fmt_value(as_dict(r).get('prior'))}",
                  as_dict(r).get("success_max"))
                 for r in as_list(gdp.get("reconstruction_success_max"))]
    refs = "".join(f"<li>{_e(r)}</li>" for r in as_list(g.get("references")))
    return _section("guarantees", "What the guarantee means",
                    f'<div class="grid2"><div><ul class="words">{words}</ul></div>'
                    f"<div>{_kv(nums)}<h3>References</h3><ul class=\"refs\">{refs}</ul></div>"
                    "</div>")


def _accounting(e: dict[str, Any]) -> str:
    """An entry's accounting: pure epsilon-DP unless it states rho-zCDP (Gaussian modes)."""
    text = str(e.get("accounting", "pure epsilon-DP"))
    extra = [f"{k} {fmt_value(e[k])}" for k in ("rho", "mu") if isinstance(e.get(k), int | float)]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _ledger(doc: dict[str, Any]) -> str:
    ledger = as_dict(doc.get("ledger"))
    entries = [as_dict(e) for e in as_list(ledger.get("entries"))]
    rows = [[f'<span class="mono">{_e(e.get("id"))}</span>', _e(e.get("mechanism")),
             f'<span class="mono small">{_e(e.get("constructor"))}</span>',
             *(f'<span class="num">{_e(fmt_value(e.get(k)))}</span>' for k in ("scale", "epsilon",
                                                                           "delta")),
             _e(_accounting(e)), _e(e.get("scope")), _e(e.get("composition"))] for e in entries]
    rows.append(["<strong>total</strong>", "", "", "",
                 f"<strong>{_e(fmt_value(ledger.get('total_epsilon')))}</strong>",
                 f"<strong>{_e(fmt_value(ledger.get('total_delta')))}</strong>", "", "", ""])
    eps = [e.get("epsilon") for e in entries]
    note = ""
    if all(isinstance(x, int | float) for x in eps) and isinstance(
            ledger.get("total_epsilon"), int | float):
        s = sum(eps)
        if abs(s - ledger["total_epsilon"]) > 1e-9 * max(1.0, s):
            note = (f'<p class="bad">The entries sum to epsilon {_e(fmt_value(s))}, the stated '
                    "total differs: read the accountant's note and the composition column.</p>")
    return _section("ledger", "Privacy ledger",
                    _table(["mechanism id", "mechanism", "OpenDP constructor", "scale", "epsilon",
                            "delta", "accounting", "scope", "composition"], rows, "ledger")
                    + f'<p class="muted">Accountant: {_e(ledger.get("accountant"))}</p>' + note)


def _legend(doc: dict[str, Any]) -> str:
    floor = count_floor(doc)
    sw = [("ok", "noisy count"), ("low", f"under the floor n_min = {floor} or within one noise "
                                        "scale of zero"), ("neg", "negative (noise)")]
    return '<p class="legend">' + "".join(
        f'<svg width="14" height="14" aria-hidden="true"><rect class="bar {c}" width="14" '
        f'height="14" rx="2"/></svg> {_e(t)} ' for c, t in sw) + "</p>"


def _counts(doc: dict[str, Any]) -> str:
    counts = as_dict(doc.get("counts"))
    classes = class_labels(doc)
    label = as_dict(doc.get("schema")).get("x-label", "class")
    heads = [f"{label} {c}" for c in classes]
    parts = [_legend(doc)]
    cb = as_dict(counts.get("class_balance"))
    parts.append("<h3>Class balance</h3>" + _count_chart(
        doc, "class balance", heads, cb.get("mechanism_id"),
        [("noisy count", as_list(cb.get("dp_counts")))]))
    hists = as_dict(counts.get("histograms"))
    order = [f for f in as_list(as_dict(doc.get("schema")).get("x-field-order")) if f in hists]
    hists = {k: hists[k] for k in [*order, *(k for k in hists if k not in order)]}
    if hists:
        parts.append("<h3>Class-conditional histograms</h3>")
    for name, h in hists.items():
        h = as_dict(h)
        keys = [str(k) for k in as_list(h.get("keys"))]
        cols = list(zip(heads, [as_list(r) for r in as_list(h.get("dp_counts_by_class"))],
                        strict=False))
        edges = h.get("edges")
        sub = (f"{_e(h.get('kind', ''))}; edges {_e(_json(edges))}" if edges is not None
               else f"{_e(h.get('kind', ''))}")
        parts.append(f'<div class="hist"><h4><span class="mono">{_e(name)}</span> '
                     f'<span class="muted small">{sub} · {_e(h.get("mechanism_id"))}</span></h4>'
                     + _count_chart(doc, f"histogram {name}", keys, h.get("mechanism_id"), cols)
                     + "</div>")
    parts.append(_cohorts(doc, as_dict(counts.get("cohorts")), label))
    parts.extend(_rate(doc, as_dict(r)) for r in as_list(counts.get("rates")))
    other = {k: v for k, v in counts.items() if k not in _KNOWN_COUNTS}
    if other:
        parts.append("<h3>Other released values</h3>" + "".join(
            f'<h4 class="mono">{_e(k)}</h4><pre>{_e(_json(v))}</pre>' for k, v in other.items()))
    if "signed" in counts:
        parts.append(f'<p class="muted">Counts released signed (may be negative): '
                     f"{_e(fmt_value(counts['signed']))}</p>")
    return _section("counts", "Noisy counts", "".join(parts))


def _cohorts(doc: dict[str, Any], co: dict[str, Any], label: Any) -> str:
    cohorts = [as_dict(c) for c in as_list(co.get("cohorts"))]
    if not cohorts:
        return ""
    names = [str(c.get("name")) for c in cohorts]
    classes = [str(c) for c in as_list(co.get("classes"))]
    cols = [(f"{label} {cl}", [as_list(c.get("dp_counts_by_class"))[j]
                               if j < len(as_list(c.get("dp_counts_by_class"))) else None
                               for c in cohorts]) for j, cl in enumerate(classes)]
    table = _table(["cohort", "where", "size (sum of noisy counts)"],
                   ([_e(c.get("name")), f'<span class="mono small">{_e(_json(c.get("where")))}'
                     "</span>", _e(fmt_value(c.get("post_size")))] for c in cohorts))
    return ("<h3>Cohorts</h3>" + table
            + _count_chart(doc, "cohorts by class", names, co.get("mechanism_id"), cols))


def _rate(doc: dict[str, Any], r: dict[str, Any]) -> str:
    cells = [as_dict(c) for c in as_list(r.get("cells"))]
    rows = [cell_label(c.get("cell")) for c in cells]
    rate_cells = []
    for c in cells:
        v = c.get("post_rate")
        if c.get("suppressed") or not isinstance(v, int | float):
            rate_cells.append(_Cell(None, "suppressed", "muted",
                                    f"noisy cell size {fmt_value(c.get('post_n_cell'))} "
                                    f"under n_min {fmt_value(r.get('n_min'))}"))
        else:
            rate_cells.append(_Cell(float(v), f"{100 * v:.1f} %"))
    floor = count_floor(doc)
    scale = noise_scales(doc).get(r.get("mechanism_id")) if isinstance(
        r.get("mechanism_id"), str) else None
    chart = _Chart(f"rate {r.get('name')}", rows, [
        _Column("outcome rate", rate_cells, (0.0, 1.0)),
        _Column("noisy outcome", [_count_cell(c.get("dp_n_outcome"), floor, scale)
                                  for c in cells]),
        _Column("noisy other", [_count_cell(c.get("dp_n_other"), floor, scale)
                                for c in cells]),
    ])
    outcome = as_dict(r.get("outcome"))
    return (f"<h3>Conditional rate: {_e(r.get('name'))}</h3>"
            f'<p class="muted">Outcome {_e(outcome.get("field"))} in '
            f"{_e(_json(outcome.get('values')))}, by {_e(_json(r.get('cells_by')))}; "
            f"rate = noisy outcome / (noisy outcome + noisy other), suppressed when the noisy "
            f"cell size is under n_min = {_e(fmt_value(r.get('n_min')))} · "
            f"{_e(r.get('mechanism_id'))}</p>"
            f'<div class="chartbox">{chart.svg()}</div>')


def _selection(doc: dict[str, Any]) -> str:
    sel = doc.get("selection")
    if not isinstance(sel, dict):
        return ""
    config = {k: v for k, v in sel.items() if k != "rounds"}
    parts = ["<h3>Selection config</h3>" + (
        _table(["key", "value"], ([f'<span class="mono">{_e(k)}</span>',
                                   f'<span class="mono small">{_e(_json(v))}</span>']
                                  for k, v in sorted(config.items()))) if config
        else '<p class="muted">none stated</p>')]
    groups: dict[tuple[str, str], list[str]] = {}
    for rnd, cls, role, i, rec in exemplars(doc):
        groups.setdefault((fmt_value(rnd), fmt_value(cls)), []).append(
            _record_card(doc, role, i, rec))
    eps = {fmt_value(as_dict(r).get("round")): _round_budget(as_dict(r))
           for r in as_list(sel.get("rounds"))}
    label = as_dict(doc.get("schema")).get("x-label", "class")
    current = None
    for (rnd, cls), cards in groups.items():
        if rnd != current:
            current = rnd
            parts.append(f'<h3 class="round">Round {_e(rnd)} <span class="muted small">'
                         f"{_e(eps.get(rnd))}</span></h3>")
        parts.append(f'<h4>{_e(label)} {_e(cls)}</h4><div class="cards">{"".join(cards)}</div>')
    how = {"pe-histogram": "Gaussian noisy vote histograms (pe-histogram)",
           "representatives": "votes of Gaussian noisy cluster representatives "
                              "(representatives)"}.get(str(sel.get("mode")), "DP noisy max")
    return _section("selection", "Exemplars (synthetic records chosen by DP selection)",
                    f"<p>Winners were chosen with {_e(how)} among candidates generated from "
                    "public inputs; partners are non-private contrastive examples. All are "
                    "synthetic: text that looks like personal data is highlighted.</p>"
                    + "".join(parts))


def _round_budget(r: dict[str, Any]) -> str:
    if isinstance(r.get("rho"), int | float):
        return f"rho {fmt_value(r['rho'])}, mu {fmt_value(r.get('mu'))}"
    return f"epsilon {fmt_value(r.get('epsilon'))}"


def _record_card(doc: dict[str, Any], role: str, i: int, rec: dict[str, Any]) -> str:
    """One exemplar: its free text large, its other fields as compact chips."""
    texts, others = record_layout(doc, rec)
    body = "".join(f'<div class="rtext"><span class="fname">{_flagged(k)}</span> '
                   f"{_flagged(rec[k])}</div>" for k in texts)
    chips = "".join(f'<span class="chip"><span class="fname">{_flagged(k)}</span> '
                    f"{_flagged(rec[k])}</span>" for k in others)
    return (f'<div class="rec {_e(role)}"><span class="role {_e(role)}">{_e(role)} {i + 1}'
            f'</span>{body}<div class="chips">{chips}</div></div>')


def _flagged(value: Any) -> str:
    """Escaped text, highlighted when it looks like personal data."""
    text = value if isinstance(value, str) else _json(value)
    hits = personal_data_hits(text)
    if not hits:
        return _e(text)
    why = "; ".join(f"looks like a {p}" for p, _ in hits)
    return f'<span class="pii" title="{_e(why)}">{_e(text)}</span>'


def _schema(doc: dict[str, Any]) -> str:
    schema = as_dict(doc.get("schema"))
    props = as_dict(schema.get("properties"))
    order = [str(f) for f in as_list(schema.get("x-field-order"))] or list(props)
    rows = []
    for name in order:
        p = as_dict(props.get(name))
        role = ("label" if name == schema.get("x-label")
                else "person id (never released)" if name == schema.get("x-id") else "")
        domain = (p.get("enum") if "enum" in p else p.get("x-bins") if "x-bins" in p else
                  {k: p[k] for k in ("minimum", "maximum", "minLength", "maxLength") if k in p})
        rows.append([f'<span class="mono">{_e(name)}</span>', _e(p.get("type")), _e(role),
                     _e(p.get("description", "")), f'<span class="mono small">{_e(_json(domain))}'
                     "</span>"])
    return _section("schema", "Public schema",
                    f'<p class="muted">{_e(schema.get("description", ""))} · SHA-256 '
                    f'<span class="mono">{_e(doc.get("schema_sha256"))}</span></p>'
                    + _table(["field", "type", "role", "description", "public domain"], rows))


_STYLE = """
:root{--ink:#1d2430;--muted:#5b6675;--line:#dde3ea;--bg:#f5f7fa;--card:#fff;--ok:#3566a8;
--low:#e3a21a;--neg:#c8453b;--good:#1f7a4d;--bad:#b3261e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1320px;margin:0 auto;padding:0 24px 48px}
header.untrusted{display:flex;gap:18px;align-items:flex-start;background:#fff4e5;
border-bottom:3px solid #e3a21a;padding:18px 32px}
header h1{margin:0 0 6px;font-size:22px}header p{margin:4px 0;max-width:1100px}
.badge{background:var(--bad);color:#fff;font-weight:700;padding:6px 10px;border-radius:4px;
letter-spacing:.05em;white-space:nowrap;margin-top:2px}
nav{position:sticky;top:0;z-index:2;background:#1d2430;padding:8px 32px;display:flex;
gap:18px;flex-wrap:wrap}
nav a{color:#e6edf5;text-decoration:none;font-weight:600;font-size:13px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;
margin:20px 0;padding:16px 22px}
h2{margin:0 0 12px;font-size:19px}h3{margin:18px 0 8px;font-size:16px}
h4{margin:14px 0 6px;font-size:14px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top;
overflow-wrap:break-word}
table.kv td{overflow-wrap:anywhere}.num{white-space:nowrap;font-variant-numeric:tabular-nums}
thead th{background:#eef2f7;font-size:12px;text-transform:uppercase;letter-spacing:.03em;
color:var(--muted)}
table.kv th{width:45%;font-weight:600;color:var(--muted)}
table.ledger .mono{overflow-wrap:normal}
table.ledger tr:last-child td{border-top:2px solid var(--ink);background:#f7f9fb}
table.warn td:first-child{width:24%}
details summary{cursor:pointer;font-weight:600;margin:8px 0}
.wk{background:#fdecc8;border-radius:3px;padding:1px 6px;font-size:12px;font-weight:600}
.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px;
overflow-wrap:anywhere}
.small{font-size:11.5px}.muted{color:var(--muted)}.good{color:var(--good)}
.bad{color:var(--bad);font-weight:600}
.tiles{display:flex;gap:14px;flex-wrap:wrap;margin-bottom:8px}
.tile{border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:170px;
background:#fafbfd}
.tile .tv{font-size:24px;font-weight:700}.tile .tl{color:var(--muted);font-size:12px}
.tile.good .tv{color:var(--good)}.tile.bad .tv{color:var(--bad)}
.grid3{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:22px}
.grid2{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:26px}
ul.words li{margin:6px 0;font-size:15px}ul.refs{font-size:12px;color:var(--muted)}
.chartbox{overflow-x:auto;margin:4px 0 10px}
.hist{border-top:1px dashed var(--line);padding-top:4px}
.legend{color:var(--muted);font-size:12.5px}.legend svg{vertical-align:-2px;margin-left:10px}
svg.chart text{font-size:12px;fill:var(--ink)}
svg.chart .rowlabel{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:11.5px}
svg.chart .colhead{font-weight:700;font-size:12.5px}
svg.chart .stripe{fill:#f6f8fb}svg.chart .sep{stroke:var(--line)}
svg.chart .zero{stroke:#8a94a3;stroke-width:1}
.bar.ok{fill:var(--ok)}.bar.low{fill:var(--low)}.bar.neg{fill:var(--neg)}
svg.chart .val{font-variant-numeric:tabular-nums}
svg.chart .val.neg{fill:var(--neg)}svg.chart .val.low{fill:#9a6a00}
svg.chart .val.muted{fill:var(--muted);font-style:italic}
.st-verified{color:var(--good);font-weight:700}.st-invalid{color:var(--bad);font-weight:700}
.st-unchecked{color:var(--muted);font-weight:700}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:10px}
.rec{border:1px solid var(--line);border-left:4px solid var(--ok);border-radius:6px;
padding:8px 10px;background:#fbfcfe}
.rec.partner{border-left-color:#7a5aa8}
.rtext{font-size:14.5px;margin:6px 0}.fname{color:var(--muted);font-size:11px;
font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.chips{display:flex;flex-wrap:wrap;gap:4px 10px;font-size:12.5px}
.chip{white-space:nowrap}h3.round{border-top:1px solid var(--line);padding-top:12px}
.role{font-size:11px;font-weight:700;border-radius:3px;padding:1px 6px;white-space:nowrap}
.role.winner{background:#dbe7f7}.role.partner{background:#ebe3f5}
.pii{background:#fde2df;outline:2px solid var(--neg);border-radius:2px}
pre{background:#f3f5f8;padding:8px;overflow-x:auto;white-space:pre-wrap}
code{background:#f0f2f5;padding:0 4px;border-radius:3px}
footer{color:var(--muted);font-size:12px;text-align:center;margin:24px 0}
"""


def render_review_html(doc: dict[str, Any],
                       signature_status: list[SignatureStatus] | None = None) -> str:
    """The whole page as one string; depends on nothing but its arguments."""
    warnings = review_warnings(doc)
    if signature_status is not None:
        warnings = signature_warnings(doc, signature_status) + warnings
    body = (_summary(doc) + _signatures(signature_status) + _warnings(warnings)
            + _guarantees(doc) + _ledger(doc) + _counts(doc) + _selection(doc) + _schema(doc))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>selpe-audit review: {_e(doc.get('dataset', ''))} (not trusted)</title>"
        f"<style>{_STYLE}</style></head><body>"
        + _header(doc) + _nav(isinstance(doc.get("selection"), dict), len(warnings))
        + f"<main>{body}</main>"
        "<footer>Generated by selpe-audit from release.json. Derived and not trusted: "
        "verify release.json's signatures before relying on it.</footer></body></html>\n")


def write_review_html(artifact_dir: Path, doc: dict[str, Any] | None = None, *,
                      signature_status: list[SignatureStatus] | None = None,
                      path: Path | None = None) -> Path:
    """Write review.html (atomically; default ARTIFACT_DIR/review.html) and return its path."""
    d = Path(artifact_dir)
    if doc is None:
        doc = read_release_unverified(d)
    out = Path(path) if path is not None else d / REVIEW_FILE
    try:
        atomic_write_bytes(out, render_review_html(doc, signature_status).encode("utf-8"))
    except OSError as e:
        raise UserError(f"{out}: cannot write the review page ({e.strerror})") from None
    return out
