"""``review.html``: one self-contained page a reviewer can open anywhere, even offline.

Everything on the page is derived from ``release.json`` and the page itself is not
trusted. So it must be safe to open whatever the artifact holds: every text from the
artifact goes through `_e` (HTML escaping, quotes included, control characters made
visible), the page has no JavaScript and a Content-Security-Policy that forbids scripts
and any network access (`review.markup`, its building blocks), and the charts are inline
SVG drawn here (`review.charts`). Over 400 lines: one section renderer per part of the
artifact, kept together so that the page's order is the artifact's order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from selpe_audit.artifact.canonical import atomic_write_bytes, canonical_bytes
from selpe_audit.artifact.document import read_release_unverified
from selpe_audit.artifact.guarantees import protects
from selpe_audit.artifact.model_block import DP_VOCABULARY, CountsModel, ModelMarginal
from selpe_audit.artifact.modes import find_mode
from selpe_audit.artifact.records import Cohorts, LedgerEntry, Rate, SelectionRound
from selpe_audit.artifact.view import ReleaseView, as_dict, cell_label
from selpe_audit.errors import UserError
from selpe_audit.review.charts import Cell, Chart, Column, count_cell
from selpe_audit.review.charts import escape_text as _e
from selpe_audit.review.markup import count_chart as _count_chart
from selpe_audit.review.markup import flagged as _flagged
from selpe_audit.review.markup import html_page
from selpe_audit.review.markup import kv_table as _kv
from selpe_audit.review.markup import section as _section
from selpe_audit.review.markup import short as _short
from selpe_audit.review.markup import table as _table
from selpe_audit.review.markup import to_json as _json
from selpe_audit.review.people import people_section
from selpe_audit.review.style import STYLE
from selpe_audit.review.view import (
    EPSILON_HIGH,
    ReviewWarning,
    SignatureStatus,
    as_view,
    cell_rows,
    class_grid,
    count_flag,
    count_floor,
    fmt_value,
    marginal_title,
    model_summary,
    noise_scale,
    plan_rows,
    plan_summary,
    record_layout,
    review_warnings,
    shown_extra,
    signature_warnings,
    unit_rows,
)

REVIEW_FILE = "review.html"



# ----- page sections --------------------------------------------------------------------------

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


def _nav(view: ReleaseView, n_warnings: int) -> str:
    items = [("summary", "Summary"), ("signatures", "Signatures"),
             ("warnings", f"Warnings ({n_warnings})"), ("guarantees", "Guarantees"),
             ("ledger", "Ledger"), *([("plan", "Plan")] if plan_rows(view) else []),
             ("counts", "Noisy counts")]
    if view.persons is not None:
        items.append(("people", "People"))
    if view.counts.model is not None:
        items.append(("model", "Counts model"))
    if view.counts.topics:
        items.append(("topics", "Topics"))
    if view.selection is not None:
        items.append(("selection", "Exemplars"))
    items.append(("schema", "Schema"))
    return "<nav>" + "".join(f'<a href="#{a}">{t}</a>' for a, t in items) + "</nav>"


def _summary(view: ReleaseView) -> str:
    ledger, budget, guar, doc = view.ledger, view.budget, view.guarantees, view.doc
    eps = ledger.total_epsilon
    high = isinstance(eps, int | float) and eps > EPSILON_HIGH
    tiles = [("epsilon spent", _short(eps), "bad" if high else "good"),
             ("delta", _short(ledger.total_delta), ""),
             ("membership advantage ≤", _short(guar.membership_advantage_max), ""),
             ("mechanisms", str(len(ledger.entries)), "")]
    tile_html = "".join(f'<div class="tile {c}"><div class="tv">{_e(v)}</div>'
                        f'<div class="tl">{_e(k)}</div></div>' for k, v, c in tiles)
    about = _kv([("dataset", view.dataset), ("created", doc.get("created")),
                 ("format", f"{doc.get('format')} v{doc.get('format_version')}"),
                 ("schema SHA-256", view.schema_sha256),
                 ("release key id", view.release_key_id),
                 *unit_rows(view)])
    split = as_dict(budget.get("split"))
    bud = _kv([("total epsilon", budget.get("epsilon")), ("delta", budget.get("delta")),
               *((f"share: {k}", v) for k, v in split.items()),
               *((f"counts: {k}", v) for k, v in as_dict(budget.get("counts")).items()),
               *((k, v) for k, v in budget.items()
                 if k not in {"epsilon", "delta", "split", "counts", "plan"})])
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


def _guarantees(view: ReleaseView) -> str:
    g = view.guarantees
    words = "".join(f"<li>{_e(s)}</li>" for s in g.statements)
    nums = [("protects", protects(view.privacy_unit)), ("epsilon", g.epsilon),
            ("delta", g.delta),
            ("membership advantage max", g.membership_advantage_max)]
    nums += [(f"membership TPR max at FPR {fmt_value(b.fpr)}", b.tpr_max)
             for b in g.membership_tpr_max]
    nums += [(f"reconstruction success max at prior {fmt_value(b.prior)}", b.success_max)
             for b in g.reconstruction_success_max]
    gdp = g.selection_gdp
    if gdp is not None:
        words += "".join(f"<li>{_e(s)}</li>" for s in gdp.statements)
        words += f'<li class="muted">{_e(gdp.note)}</li>'
        nums.append(("selection mu (GDP)", gdp.mu))
        nums += [(f"selection (p, r): r at prior {fmt_value(b.prior)}", b.success_max)
                 for b in gdp.reconstruction_success_max]
    refs = "".join(f"<li>{_e(r)}</li>" for r in g.references)
    return _section("guarantees", "What the guarantee means",
                    f'<div class="grid2"><div><ul class="words">{words}</ul></div>'
                    f"<div>{_kv(nums)}<h3>References</h3><ul class=\"refs\">{refs}</ul></div>"
                    "</div>")


def _accounting(e: LedgerEntry) -> str:
    """An entry's accounting: pure epsilon-DP unless it states rho-zCDP (Gaussian modes)."""
    text = str(e.accounting if e.accounting is not None else "pure epsilon-DP")
    extra = [f"{k} {fmt_value(v)}" for k, v in (("rho", e.rho), ("mu", e.mu))
             if isinstance(v, int | float)]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _plan(view: ReleaseView) -> str:
    """What the release sized to the table, each choice with its reason."""
    rows = plan_rows(view)
    if not rows:
        return ""
    return _section("plan", "Plan", f"<p>{_e(plan_summary(view) or '')}</p>"
                    + _table(["part", "choice", "reason"],
                             [[_e(v) for v in row] for row in rows]))


def _ledger(view: ReleaseView) -> str:
    ledger = view.ledger
    entries = ledger.entries
    rows = [[f'<span class="mono">{_e(e.id)}</span>', _e(e.mechanism),
             f'<span class="mono small">{_e(e.constructor)}</span>',
             *(f'<span class="num">{_e(fmt_value(v))}</span>' for v in (e.scale, e.epsilon,
                                                                        e.delta)),
             _e(_accounting(e)), _e(e.scope), _e(e.composition)] for e in entries]
    rows.append(["<strong>total</strong>", "", "", "",
                 f"<strong>{_e(fmt_value(ledger.total_epsilon))}</strong>",
                 f"<strong>{_e(fmt_value(ledger.total_delta))}</strong>", "", "", ""])
    eps = [e.epsilon for e in entries]
    note = ""
    total = ledger.total_epsilon
    if all(isinstance(x, int | float) for x in eps) and isinstance(total, int | float):
        s = sum(eps)
        if abs(s - total) > 1e-9 * max(1.0, s):
            note = (f'<p class="bad">The entries sum to epsilon {_e(fmt_value(s))}, the stated '
                    "total differs: read the accountant's note and the composition column.</p>")
    return _section("ledger", "Privacy ledger",
                    _table(["mechanism id", "mechanism", "OpenDP constructor", "scale", "epsilon",
                            "delta", "accounting", "scope", "composition"], rows, "ledger")
                    + f'<p class="muted">Accountant: {_e(ledger.accountant)}</p>' + note)


def _legend(view: ReleaseView) -> str:
    floor = count_floor(view)
    sw = [("ok", "noisy count"), ("low", f"under the floor n_min = {floor} or within one noise "
                                        "scale of zero"), ("neg", "negative (noise)")]
    return '<p class="legend">' + "".join(
        f'<svg width="14" height="14" aria-hidden="true"><rect class="bar {c}" width="14" '
        f'height="14" rx="2"/></svg> {_e(t)} ' for c, t in sw) + "</p>"


def _counts(view: ReleaseView) -> str:
    counts = view.counts
    label = view.schema_json.get("x-label", "class")
    heads = [f"{label} {c}" for c in counts.class_balance.classes]
    parts = [_legend(view)]
    cb = counts.class_balance
    parts.append("<h3>Class balance</h3>" + _count_chart(
        view, "class balance", heads, cb.mechanism_id, [("noisy count", cb.dp_counts)]))
    hists = view.histograms_in_field_order()
    if hists:
        parts.append("<h3>Class-conditional histograms</h3>")
    for name, h in hists:
        cols = list(zip(heads, h.dp_counts_by_class, strict=False))
        sub = (f"{_e(h.kind or '')}; edges {_e(_json(list(h.edges)))}" if h.edges is not None
               else f"{_e(h.kind or '')}")
        parts.append(f'<div class="hist"><h4><span class="mono">{_e(name)}</span> '
                     f'<span class="muted small">{sub} · {_e(h.mechanism_id)}</span></h4>'
                     + _count_chart(view, f"histogram {name}", [str(k) for k in h.keys],
                                    h.mechanism_id, cols)
                     + "</div>")
    if counts.cohorts is not None:
        parts.append(_cohorts(view, counts.cohorts, label))
    parts.extend(_rate(view, r) for r in counts.rates)
    extra = shown_extra(view)
    if extra:
        parts.append("<h3>Other released values</h3>" + "".join(
            f'<h4 class="mono">{_e(k)}</h4><pre>{_e(_json(v))}</pre>'
            for k, v in extra.items()))
    if "signed" in as_dict(view.doc.get("counts")):
        parts.append(f'<p class="muted">Counts released signed (may be negative): '
                     f"{_e(fmt_value(counts.signed))}</p>")
    return _section("counts", "Noisy counts", "".join(parts))


def _model(view: ReleaseView) -> str:
    """Model modes: the counts model's header and columns, then every released marginal."""
    model = view.counts.model
    if model is None:
        return ""
    cols = _table(["column", "field", "kind", "keys (then the null cell, which no row reaches)"],
                  ([f'<span class="mono">{_e(c.name)}</span>', _e(c.field), _e(c.kind),
                    _e(", ".join(map(str, c.keys)))] for c in model.columns))
    parts = [_kv(model_summary(view, model)), "<h3>Columns</h3>", cols,
             f"<h3>Released marginals ({len(model.marginals)})</h3>", _legend(view)]
    parts += [_marginal(view, model, m) for m in model.marginals]
    return _section("model", "Counts model", "".join(parts))


def _marginal(view: ReleaseView, model: CountsModel, m: ModelMarginal) -> str:
    """One marginal: by class like the histograms when it has one, else all its cells."""
    scale, title = noise_scale(m.stddev), marginal_title(m)
    grid = class_grid(model, m)
    if grid is not None:
        body = _count_chart(view, title, grid[0], None, grid[1], scale=scale)
    else:
        heads, cells = cell_rows(model, m)
        floor = count_floor(view)
        rows = ([*map(_e, keys), _flat_count(v, floor, scale)] for keys, v in cells)
        body = (f"<details><summary>{len(cells)} cells</summary>"
                + _table([*map(_e, heads), "noisy count"], rows) + "</details>")
    return f'<div class="hist"><h4 class="mono">{_e(title)}</h4>{body}</div>'


def _flat_count(value: Any, floor: int, scale: float | None) -> str:
    """A noisy count in a cell table, its flag (if any) as a tooltip and a colour."""
    flag = count_flag(value, floor, scale)
    css = "num" + ("" if not flag else " bad" if flag == "negative" else " muted")
    return f'<span class="{css}" title="{_e(flag or "")}">{_e(fmt_value(value))}</span>'


def _topics(view: ReleaseView) -> str:
    """Per free-text field, its public topic codebook: topic j of the model is anchor j."""
    parts = []
    for name, tp in view.counts.topics.items():
        emb = tp.embeddings or ()
        rows = ([_e(j), _flagged(a.text), _e(len(a.members)),
                 f"<details><summary>{len(a.members)} member texts</summary><ul>"
                 + "".join(f"<li>{_flagged(t)}</li>" for t in a.members) + "</ul></details>"]
                for j, a in enumerate(tp.anchors))
        parts.append(
            f'<h3>Topics of <span class="mono">{_e(name)}</span></h3>'
            + _kv([("k", tp.k), ("source", tp.source), ("embedding model", tp.embedding_model),
                   ("texts considered", tp.texts_considered)]
                  + ([("vocabulary", f"{tp.kind} released by OpenDP with noisy counts "
                       "(see the ledger); the last topic is every other text"
                       + (f"; a text's first {tp.slots} released keywords are its topics in "
                          f"model columns topic:{name} to topic:{name}#{tp.slots}"
                          if isinstance(tp.slots, int) and tp.slots > 1 else ""))]
                     if tp.source == DP_VOCABULARY else []))
            + _table(["topic", "anchor text (public)", "members", "member texts (public)"], rows)
            + f"<details><summary>{len(emb)} anchor embeddings (public vectors of the anchor "
            f"texts)</summary><pre>{_e(_json(list(emb)))}</pre></details>")
    if not parts:
        return ""
    return _section("topics", "Topics (public codebooks of the free-text fields)",
                    "<p>Topic j of a model column <code>topic:FIELD</code> is anchor j; every "
                    "text here is public (from the public pool or LLM candidates), or a phrase "
                    "or keyword of the private texts that OpenDP released above its threshold "
                    "(source <code>dp phrases</code>): read each one; reject one with "
                    "<code>[counts] deny</code> and release again.</p>"
                    + "".join(parts))


def _cohorts(view: ReleaseView, co: Cohorts, label: Any) -> str:
    if not co.cohorts:
        return ""
    names = [str(c.name) for c in co.cohorts]
    cols = [(f"{label} {cl}", [c.dp_counts_by_class[j] if j < len(c.dp_counts_by_class)
                               else None for c in co.cohorts])
            for j, cl in enumerate(str(x) for x in co.classes)]
    table = _table(["cohort", "where", "size (sum of noisy counts)"],
                   ([_e(c.name), f'<span class="mono small">{_e(_json(c.where))}'
                     "</span>", _e(fmt_value(c.post_size))] for c in co.cohorts))
    return ("<h3>Cohorts</h3>" + table
            + _count_chart(view, "cohorts by class", names, co.mechanism_id, cols))


def _rate(view: ReleaseView, r: Rate) -> str:
    rows = [cell_label(c.cell) for c in r.cells]
    rate_cells = []
    for c in r.cells:
        v = c.post_rate
        if c.suppressed or not isinstance(v, int | float):
            rate_cells.append(Cell(None, "suppressed", "muted",
                                   f"noisy cell size {fmt_value(c.post_n_cell)} "
                                   f"under n_min {fmt_value(r.n_min)}"))
        else:
            rate_cells.append(Cell(float(v), f"{100 * v:.1f} %"))
    floor = count_floor(view)
    scale = view.ledger.scales().get(r.mechanism_id) if r.mechanism_id else None
    chart = Chart(f"rate {r.name}", rows, [
        Column("outcome rate", rate_cells, (0.0, 1.0)),
        Column("noisy outcome", [count_cell(c.dp_n_outcome, floor, scale) for c in r.cells]),
        Column("noisy other", [count_cell(c.dp_n_other, floor, scale) for c in r.cells]),
    ])
    return (f"<h3>Conditional rate: {_e(r.name)}</h3>"
            f'<p class="muted">Outcome {_e(r.outcome.field)} in '
            f"{_e(_json(list(r.outcome.values)))}, by {_e(_json(list(r.cells_by)))}; "
            f"rate = noisy outcome / (noisy outcome + noisy other), suppressed when the noisy "
            f"cell size is under n_min = {_e(fmt_value(r.n_min))} · "
            f"{_e(r.mechanism_id)}</p>"
            f'<div class="chartbox">{chart.svg()}</div>')


def _selection(view: ReleaseView) -> str:
    sel = view.selection
    if sel is None:
        return ""
    config = sel.config
    parts = ["<h3>Selection config</h3>" + (
        _table(["key", "value"], ([f'<span class="mono">{_e(k)}</span>',
                                   f'<span class="mono small">{_e(_json(v))}</span>']
                                  for k, v in sorted(config.items()))) if config
        else '<p class="muted">none stated</p>')]
    groups: dict[tuple[str, str], list[str]] = {}
    for ex in sel.exemplars():
        groups.setdefault((fmt_value(ex.round), fmt_value(ex.class_value)), []).append(
            _record_card(view, ex.role, ex.index, ex.record))
    eps = {fmt_value(r.round): _round_budget(r) for r in sel.rounds}
    label = view.schema_json.get("x-label", "class")
    current = None
    for (rnd, cls), cards in groups.items():
        if rnd != current:
            current = rnd
            parts.append(f'<h3 class="round">Round {_e(rnd)} <span class="muted small">'
                         f"{_e(eps.get(rnd))}</span></h3>")
        parts.append(f'<h4>{_e(label)} {_e(cls)}</h4><div class="cards">{"".join(cards)}</div>')
    mode = find_mode(sel.mode)
    said = sel.description.get("review")
    how = said if isinstance(said, str) else mode.review if mode is not None else (
        f"the '{fmt_value(sel.mode)}' mode (not described in the artifact)")
    return _section("selection", "Exemplars (synthetic records chosen by DP selection)",
                    f"<p>Winners were chosen with {_e(how)} among candidates generated from "
                    "public inputs; partners are non-private contrastive examples. All are "
                    "synthetic: text that looks like personal data is highlighted.</p>"
                    + "".join(parts))


def _round_budget(r: SelectionRound) -> str:
    if isinstance(r.rho, int | float):
        return f"rho {fmt_value(r.rho)}, mu {fmt_value(r.mu)}"
    return f"epsilon {fmt_value(r.epsilon)}"


def _record_card(view: ReleaseView, role: str, i: int, rec: Mapping[str, Any]) -> str:
    """One exemplar: its free text large, its other fields as compact chips."""
    texts, others = record_layout(view, rec)
    body = "".join(f'<div class="rtext"><span class="fname">{_flagged(k)}</span> '
                   f"{_flagged(rec[k])}</div>" for k in texts)
    chips = "".join(f'<span class="chip"><span class="fname">{_flagged(k)}</span> '
                    f"{_flagged(rec[k])}</span>" for k in others)
    return (f'<div class="rec {_e(role)}"><span class="role {_e(role)}">{_e(role)} {i + 1}'
            f'</span>{body}<div class="chips">{chips}</div></div>')


def _schema(view: ReleaseView) -> str:
    schema = view.schema_json
    props = as_dict(schema.get("properties"))
    order = view.field_order or list(props)
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
                    f'<span class="mono">{_e(view.schema_sha256)}</span></p>'
                    + _table(["field", "type", "role", "description", "public domain"], rows))


def render_review_html(doc: dict[str, Any],
                       signature_status: list[SignatureStatus] | None = None,
                       release_key_id: str | None = None) -> str:
    """The whole page as one string; depends on nothing but its arguments
    (``release_key_id``: the release key the reviewer named, if any)."""
    view = as_view(doc)
    warnings = review_warnings(view)
    if signature_status is not None:
        warnings = signature_warnings(view, signature_status, release_key_id) + warnings
    body = (_summary(view) + _signatures(signature_status) + _warnings(warnings)
            + _guarantees(view) + _ledger(view) + _plan(view) + _counts(view)
            + people_section(view) + _model(view)
            + _topics(view) + _selection(view)
            + _schema(view))
    return html_page(
        f"selpe-audit review: {doc.get('dataset', '')} (not trusted)", STYLE,
        _header(doc) + _nav(view, len(warnings)) + f"<main>{body}</main>"
        "<footer>Generated by selpe-audit from release.json. Derived and not trusted: "
        "verify release.json's signatures before relying on it.</footer>")


def render_summary_html(doc: dict[str, Any]) -> str:
    """The page's summary and guarantee as a fragment for a notebook (without the page's
    stylesheet, which would restyle the notebook around it)."""
    view = as_view(doc)
    return f"<div>{_summary(view)}{_guarantees(view)}</div>"


def write_review_html(artifact_dir: Path, doc: dict[str, Any] | None = None, *,
                      signature_status: list[SignatureStatus] | None = None,
                      path: Path | None = None, release_key_id: str | None = None) -> Path:
    """Write review.html (atomically; default ARTIFACT_DIR/review.html) and return its path."""
    d = Path(artifact_dir)
    if doc is None:
        doc = read_release_unverified(d)
    out = Path(path) if path is not None else d / REVIEW_FILE
    try:
        atomic_write_bytes(out, render_review_html(doc, signature_status,
                                                   release_key_id).encode("utf-8"))
    except OSError as e:
        raise UserError(f"{out}: cannot write the review page ({e.strerror})") from None
    return out
