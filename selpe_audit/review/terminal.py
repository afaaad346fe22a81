"""``selpe-audit review`` and ``selpe-audit approve``: the artifact for a human.

`review` shows everything in ``release.json`` - signature status per key first, because
the document is displayed before anyone has verified it - and (re)writes review.html.
`approve` shows a summary, asks, and signs the exact bytes that were shown with a reviewer
key; `selpe_audit.artifact.read_release` counts that signature as an approval when the
reviewer's public key is trusted. Over 400 lines: one renderer per part of the artifact,
in the order review prints them, then the two commands.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.prompt import Confirm
from rich.table import Table
from rich.text import Text

from selpe_audit.artifact.document import RELEASE_FILE, read_release_unverified
from selpe_audit.artifact.guarantees import protects
from selpe_audit.artifact.model_block import CountsModel, ModelMarginal
from selpe_audit.artifact.records import Rate
from selpe_audit.artifact.signing import (
    key_id,
    load_public_key,
)
from selpe_audit.artifact.view import ReleaseView, as_dict, cell_label
from selpe_audit.cli.command import Command
from selpe_audit.errors import UserError
from selpe_audit.review.approval import released_bytes, reviewer_key_id, sign_approval
from selpe_audit.review.page import REVIEW_FILE, write_review_html
from selpe_audit.review.view import (
    EPSILON_HIGH,
    FLAT_CELLS_SHOWN,
    ReviewWarning,
    SignatureStatus,
    cell_rows,
    class_grid,
    count_flag,
    count_floor,
    display_text,
    flag_limits,
    fmt_value,
    marginal_title,
    model_summary,
    noise_scale,
    plan_rows,
    plan_summary,
    record_layout,
    review_warnings,
    shown_extra,
    signature_statuses,
    signature_warnings,
    unit_rows,
)

BAR_WIDTH = 12
_FLAG_STYLE = {"negative": "red", None: "blue"}


def _t(value: Any, style: str = "") -> Text:
    """Artifact text for the terminal: never parsed as markup, control codes made visible."""
    return Text(display_text(fmt_value(value)), style=style)


def _json(x: Any) -> str:
    return json.dumps(x, ensure_ascii=False, sort_keys=True)


def _plain(x: Any) -> str:
    """A record value as text: strings as they are, anything else as JSON."""
    return x if isinstance(x, str) else _json(x)


# ----- review --------------------------------------------------------------------------------

def _signature_table(statuses: list[SignatureStatus], trusted: list[str]) -> Table:
    t = Table(title=Text(f"signatures ({len(trusted)} trusted key(s) given)"), title_justify="left")
    for col in ("key id", "role", "status", "meaning"):
        t.add_column(col)
    style = {"verified": "bold green", "INVALID": "bold red", "unchecked": "yellow"}
    for s in statuses:
        t.add_row(_t(s.key_id), "release key" if s.is_release_key else "reviewer (approval)",
                  _t(s.status, style[s.status]), _t(s.detail))
    if not statuses:
        t.add_row("—", "", Text("none", "bold red"), "no signature files in signatures/")
    return t


def _summary_table(view: ReleaseView, sha: str) -> Table:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    doc = view.doc
    rows = [("dataset", view.dataset), ("created", doc.get("created")),
            ("format", f"{doc.get('format')} v{doc.get('format_version')}"),
            ("release.json SHA-256", sha), ("schema SHA-256", view.schema_sha256),
            ("release key id", view.release_key_id)]
    rows += unit_rows(view)
    rows += [(f"budget: {k}", v if not isinstance(v, dict) else _json(v))
             for k, v in view.budget.items() if k != "plan"]
    rows += [("versions", ", ".join(f"{k} {v}" for k, v in
                                    sorted(as_dict(doc.get("tool")).items())))]
    for k, v in rows:
        t.add_row(_t(k), _t(v))
    return t


def _plan_table(view: ReleaseView) -> Table | None:
    """What the release sized to the table, each choice with its reason."""
    rows = plan_rows(view)
    if not rows:
        return None
    t = Table(title=Text("plan (from public facts and one DP count of the rows)"),
              title_justify="left")
    for col in ("part", "choice", "reason"):
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*(_t(v) for v in row))
    t.caption = Text(display_text(plan_summary(view) or ""))
    return t


def _ledger_table(view: ReleaseView) -> Table:
    ledger = view.ledger
    t = Table(title=Text("privacy ledger"), title_justify="left")
    for col in ("mechanism id", "mechanism", "constructor", "scale", "epsilon", "delta", "scope",
                "composition"):
        t.add_column(col, overflow="fold")
    for e in ledger.entries:
        t.add_row(*(_t(v) for v in (e.id, e.mechanism, e.constructor, e.scale, e.epsilon,
                                    e.delta, e.scope, e.composition)))
    eps = ledger.total_epsilon
    high = isinstance(eps, int | float) and eps > EPSILON_HIGH
    t.add_row(Text("total", "bold"), "", "", "", _t(eps, "bold red" if high else "bold"),
              _t(ledger.total_delta, "bold"), "", "", end_section=True)
    t.caption = Text(display_text(f"accountant: {ledger.accountant}"))
    return t


def _guarantees(view: ReleaseView) -> Panel:
    g = view.guarantees
    lines = [Text("protects: ", "bold") + _t(protects(view.privacy_unit))]
    lines += [Text("• ") + _t(s) for s in g.statements]
    lines += [Text("references: ", "dim") + _t(r, "dim") for r in g.references]
    return Panel(Group(*lines) if lines else Text("no guarantees stated", "bold red"),
                 title="what the guarantee means", title_align="left")


def _bar_cell(value: Any, biggest: float, floor: int, scale: float | None) -> Text:
    """A signed bar scaled to the largest |count| in its table, then the number."""
    flag = count_flag(value, floor, scale)
    style = _FLAG_STYLE.get(flag, "yellow")
    v = value if isinstance(value, int | float) and not isinstance(value, bool) else 0
    n = round(abs(v) / biggest * BAR_WIDTH) if biggest else 0
    bar = ("▒" if v < 0 else "█") * max(n, 1 if v else 0)
    return Text(f"{bar:<{BAR_WIDTH}} {display_text(fmt_value(value)):>5}", style=style)


def _count_table(view: ReleaseView, title: str, rows: list[str], mechanism_id: str | None,
                 columns: list[tuple[str, Sequence[Any]]], scale: float | None = None) -> Table:
    """Counts as bars; flagged against ``scale`` (a marginal's stddev) when given, else the
    ledger's noise scale of ``mechanism_id``."""
    floor, scale = flag_limits(view, mechanism_id, scale)
    nums = [abs(v) for _, vals in columns for v in vals
            if isinstance(v, int | float) and not isinstance(v, bool)]
    biggest = max(nums, default=0)
    t = Table(title=_t(title), title_justify="left")
    t.add_column("")
    for head, _ in columns:
        t.add_column(_t(head), no_wrap=True)
    for i, row in enumerate(rows):
        t.add_row(_t(row), *(_bar_cell(vals[i], biggest, floor, scale) if i < len(vals) else ""
                             for _, vals in columns))
    return t


def counts_parts(view: ReleaseView) -> list[Any]:
    """The counts section as renderables (the tests print it to check what is shown)."""
    counts = view.counts
    label = view.schema_json.get("x-label", "class")
    heads = [f"{label} {c}" for c in counts.class_balance.classes]
    out: list[Any] = [Text(f"noisy counts: blue = count, yellow = under the floor n_min = "
                           f"{count_floor(view)} or within one noise scale of zero, red ▒ = "
                           "negative (noise); decoders clamp at 0", "dim")]
    cb = counts.class_balance
    out.append(_count_table(view, "class balance", ["noisy count"], cb.mechanism_id,
                            [(h, [v]) for h, v in zip(heads, cb.dp_counts, strict=False)]))
    for name, h in view.histograms_in_field_order():
        out.append(_count_table(
            view, f"histogram {name} ({h.kind}) · {h.mechanism_id}",
            [str(k) for k in h.keys], h.mechanism_id,
            list(zip(heads, h.dp_counts_by_class, strict=False))))
    co = counts.cohorts
    if co is not None and co.cohorts:
        rows = [f"{c.name}  where {_json(c.where)}  size {fmt_value(c.post_size)}"
                for c in co.cohorts]
        cols = [(f"{label} {cl}", [_at(c.dp_counts_by_class, j) for c in co.cohorts])
                for j, cl in enumerate(co.classes)]
        out.append(_count_table(view, f"cohorts · {co.mechanism_id}", rows, co.mechanism_id,
                                cols))
    out.extend(_rate_table(view, r) for r in counts.rates)
    out.extend(_people(view))
    out.extend(_model(view))
    out.extend(_topics(view))
    out.extend(Text("other released values ", "bold") + _t(f"{k}: {_json(v)}")
               for k, v in shown_extra(view).items())
    return out


def _people(view: ReleaseView) -> list[Any]:
    """The people tables (a schema with person structure): visits per person by the person
    fields, then each first-step table, rows its first key's values."""
    block = view.persons
    if block is None:
        return []
    cap, t = block.cap, block.visits
    out: list[Any] = [Text(f"people: each person's first {cap} visits in the order of "
                           f"{block.order}; the last visits count reads '{cap} or more'",
                           "bold")]
    columns: dict[str, list[Any]] = {}
    for key, count in zip(t.keys, t.dp_counts, strict=False):
        columns.setdefault(" · ".join(map(str, key[:-1])) or "people", []).append(count)
    out.append(_count_table(view, f"visits per person · {t.mechanism_id}",
                            ["1 visit", *(f"{v} visits" for v in range(2, cap)),
                             f"{cap} or more visits"], t.mechanism_id,
                            list(columns.items())))
    for step in [*(block.next or {}).values(), *([block.gaps] if block.gaps else [])]:
        rows: dict[str, dict[str, Any]] = {}
        for (first, last), count in zip(step.keys, step.dp_counts, strict=False):
            rows.setdefault(str(first), {})[str(last)] = count
        lasts = list(dict.fromkeys(str(k[1]) for k in step.keys))
        out.append(_count_table(
            view, f"first step: {step.fields[0]} x {step.fields[1]} · {step.mechanism_id}",
            [f"{step.fields[0]} {r}" for r in rows], step.mechanism_id,
            [(last, [rows[r].get(last) for r in rows]) for last in lasts]))
    return out


def _model(view: ReleaseView) -> list[Any]:
    """Model modes: the counts model's header and columns, then every released marginal."""
    model = view.counts.model
    if model is None:
        return []
    head = Text("counts model: ", "bold") + Text(" · ").join(
        _t(f"{k} {fmt_value(v)}") for k, v in model_summary(view, model))
    cols = Table(title=Text("counts model columns (each key set ends with a null cell that no "
                            "row reaches)"), title_justify="left")
    for col in ("column", "field", "kind", "keys"):
        cols.add_column(col, overflow="fold")
    for c in model.columns:
        cols.add_row(_t(c.name), _t(c.field), _t(c.kind), _t(", ".join(map(str, c.keys))))
    return [head, cols, *(_marginal(view, model, m) for m in model.marginals)]


def _marginal(view: ReleaseView, model: CountsModel, m: ModelMarginal) -> Table:
    """One marginal: by class like the histograms when it has one, else its cells listed."""
    scale, title = noise_scale(m.stddev), marginal_title(m)
    grid = class_grid(model, m)
    if grid is not None:
        return _count_table(view, title, grid[0], None, grid[1], scale=scale)
    heads, cells = cell_rows(model, m)
    if len(cells) > FLAT_CELLS_SHOWN:
        title += f" (the first {FLAT_CELLS_SHOWN} shown; all are in review.html)"
    t = Table(title=_t(title), title_justify="left")
    for h in [*heads, "noisy count"]:
        t.add_column(_t(h))
    floor = count_floor(view)
    for keys, v in cells[:FLAT_CELLS_SHOWN]:
        style = _FLAG_STYLE.get(count_flag(v, floor, scale), "yellow")
        t.add_row(*map(_t, keys), _t(v, style))
    return t


def _topics(view: ReleaseView) -> list[Any]:
    """Per free-text field, its public topic codebook: topic j of the model is anchor j."""
    out: list[Any] = []
    for name, tp in view.counts.topics.items():
        out.append(Text("topics of ", "bold") + _t(
            f"{name}: k {fmt_value(tp.k)} · source {fmt_value(tp.source)} · embedding model "
            f"{fmt_value(tp.embedding_model)} · texts considered "
            f"{fmt_value(tp.texts_considered)} · {len(tp.embeddings or ())} anchor embeddings and "
            "the member texts in review.html"))
        t = Table()
        for col in ("topic", "anchor text (public)", "members"):
            t.add_column(col, overflow="fold")
        for j, a in enumerate(tp.anchors):
            t.add_row(_t(j), _t(a.text), _t(len(a.members)))
        out.append(t)
    return out


def _at(xs: Sequence[Any], i: int) -> Any:
    return xs[i] if i < len(xs) else None


def _rate_table(view: ReleaseView, r: Rate) -> Table:
    floor = count_floor(view)
    scale = view.ledger.scales().get(r.mechanism_id) if r.mechanism_id else None
    t = Table(title=_t(f"rate {r.name}: {r.outcome.field} in {_json(list(r.outcome.values))} · "
                       f"{r.mechanism_id} · suppressed under n_min = {fmt_value(r.n_min)}"),
              title_justify="left")
    for col in ("cell", "rate", "noisy outcome", "noisy other", "noisy cell size"):
        t.add_column(col)
    for c in r.cells:
        rate = c.post_rate
        shown = (Text("suppressed", "dim italic") if c.suppressed or
                 not isinstance(rate, int | float) else Text(f"{100 * rate:.1f} %"))
        t.add_row(_t(cell_label(c.cell)), shown,
                  *(_t(v, "red" if count_flag(v, floor, scale) else "")
                    for v in (c.dp_n_outcome, c.dp_n_other, c.post_n_cell)))
    return t


def _exemplars(view: ReleaseView) -> list[Any]:
    sel = view.selection
    if sel is None:
        return [Text("no selection block: no exemplars in this release", "dim")]
    out: list[Any] = [Text("selection config ", "bold") + _t(_json(sel.config))]
    eps = {fmt_value(r.round): r.epsilon for r in sel.rounds}
    tables: dict[tuple[str, str], Table] = {}
    for ex in sel.exemplars():
        rec = ex.record
        key = (fmt_value(ex.round), fmt_value(ex.class_value))
        if key not in tables:
            tables[key] = Table(title=_t(f"round {key[0]} (epsilon {fmt_value(eps.get(key[0]))})"
                                         f", class {key[1]}"), title_justify="left",
                                show_lines=True)
            tables[key].add_column("")
            tables[key].add_column("record", overflow="fold")
        texts, others = record_layout(view, rec)
        shown = Text("\n").join(_t(k, "dim") + Text(" ") + _t(_plain(rec[k]), "bold")
                                for k in texts)
        shown.append("\n" if texts else "")
        shown.append_text(Text("  ").join(_t(k, "dim") + Text(" ") + _t(_plain(rec[k]))
                                          for k in others))
        tables[key].add_row(_t(f"{ex.role} {ex.index + 1}", "bold"), shown)
    return out + list(tables.values())


def _warnings_table(warnings: list[ReviewWarning]) -> Table | Text:
    if not warnings:
        return Text("no warnings", "green")
    t = Table(title=Text(f"warnings ({len(warnings)})", "bold yellow"), title_justify="left")
    for col in ("kind", "where", "reason"):
        t.add_column(col, overflow="fold")
    style = {"small counts": "yellow"}
    for w in warnings:
        s = style.get(w.kind, "bold red")
        t.add_row(_t(w.kind, s), _t(w.where), _t(w.reason))
    return t


def _warnings_by_kind(warnings: list[ReviewWarning], page: str) -> Table | Text:
    """Warnings counted by kind, with the first place each was found: every one of them is
    on the review page and in ``review --all``."""
    if not warnings:
        return Text("no warnings", "green")
    kinds: dict[str, list[ReviewWarning]] = {}
    for w in warnings:
        kinds.setdefault(w.kind, []).append(w)
    t = Table(title=Text(f"warnings ({len(warnings)}): counted by kind", "bold yellow"),
              title_justify="left",
              caption=Text(f"every warning, with its reason: {page} or "
                           "'selpe-audit review --all'"), caption_justify="left")
    for col in ("kind", "count", "first found at"):
        t.add_column(col, overflow="fold")
    for kind, ws in kinds.items():
        more = f" and {len(ws) - 1} more" if len(ws) > 1 else ""
        t.add_row(_t(kind, "yellow" if kind == "small counts" else "bold red"),
                  _t(len(ws)), _t(f"{ws[0].where}{more}"))
    return t


def _review_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("artifact", help="artifact folder (holds release.json and signatures/)")
    p.add_argument("--trust", action="append", default=[], metavar="KEY.pub.pem",
                   help="public key to check signatures with (repeatable); without one, "
                        "signatures are listed but not checked")
    p.add_argument("--release-key", metavar="RELEASE.pub.pem",
                   help="the releaser's public key: its signature is the release signature "
                        "(default: the key release.json names, which proves nothing)")
    p.add_argument("--html", type=Path, metavar="PATH",
                   help=f"where to write the review page (default ARTIFACT/{REVIEW_FILE})")
    p.add_argument("--all", action="store_true",
                   help="list every warning with its reason (default: counted by kind; the "
                        "review page lists them all either way)")


def _review(args: argparse.Namespace) -> int:
    d = Path(args.artifact)
    doc = read_release_unverified(d)
    view = ReleaseView.parse(doc)
    sha = hashlib.sha256((d / RELEASE_FILE).read_bytes()).hexdigest()
    trust = [*args.trust, *([args.release_key] if args.release_key else [])]
    release_kid = key_id(load_public_key(args.release_key)) if args.release_key else None
    statuses = signature_statuses(d, trust, release_kid or view.release_key_id)
    warnings = signature_warnings(view, statuses, release_kid) + review_warnings(view)
    con = Console(highlight=False)
    con.print(Panel(Text("Shown BEFORE it is trusted: the numbers below are what release.json "
                         "says; the signature status says whether trusted keys signed exactly "
                         "these bytes.", "bold"), title="selpe-audit review", title_align="left"))
    con.print(_signature_table(statuses, trust))
    con.print(_summary_table(view, sha))
    if warnings:
        con.print(Text(f"{len(warnings)} warning(s): at the end", "bold yellow"))
    con.print(_ledger_table(view))
    if (plan := _plan_table(view)) is not None:
        con.print(plan)
    con.print(_guarantees(view))
    for part in [*counts_parts(view), *_exemplars(view)]:
        con.print(part)
    page = args.html or d / REVIEW_FILE
    con.print(_warnings_table(warnings) if args.all else _warnings_by_kind(warnings, str(page)))
    path = write_review_html(d, doc, signature_status=statuses, path=args.html,
                             release_key_id=release_kid)
    con.print(Text(f"wrote {path} (derived from release.json, not itself trusted)"))
    return 0


REVIEW = Command(
    name="review",
    help="show every released number, the ledger and the guarantees",
    description="Show release.json for a human before anyone trusts it: the status of every "
                "signature against the keys given with --trust, dataset, schema hash and "
                "versions, the privacy ledger, the guarantees in plain words, every released "
                "number (histograms drawn as bars), the exemplars and warnings (high epsilon, "
                "small or negative noisy counts, exemplar text that looks like personal data), "
                "counted by kind (--all lists each). "
                "Also (re)writes review.html, a self-contained page of the same.",
    add_arguments=_review_args,
    run=_review,
)


# ----- approve -------------------------------------------------------------------------------

def _approve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("artifact", help="artifact folder (holds release.json and signatures/)")
    p.add_argument("--key", required=True, metavar="REVIEWER.pem",
                   help="your reviewer private key (not the release key); make one with "
                        "'selpe-audit keygen'")
    p.add_argument("--release-key", required=True, type=Path, metavar="RELEASE.pub.pem",
                   help="the releaser's public key: approve refuses unless its signature "
                        "verifies over release.json")
    p.add_argument("--yes", action="store_true",
                   help="approve without asking (needed when there is no terminal)")


def _approve(args: argparse.Namespace) -> int:
    d = Path(args.artifact)
    data, doc = released_bytes(d, args.release_key)
    kid = reviewer_key_id(args.key, doc)
    if not args.yes and not sys.stdin.isatty():
        raise UserError("no terminal to ask for confirmation; pass --yes to approve without "
                        "asking")
    sha = hashlib.sha256(data).hexdigest()
    view = ReleaseView.parse(doc)
    warnings = (signature_warnings(view, signature_statuses(d, [args.release_key],
                                                           view.release_key_id))
                + review_warnings(view))
    con = Console(highlight=False)
    con.print(_summary_table(view, sha))
    con.print(_ledger_table(view))
    con.print(_guarantees(view))
    con.print(_warnings_by_kind(warnings, str(d / REVIEW_FILE)))
    con.print(Text("Have you run 'selpe-audit review' and read every number? Approving signs "
                   "these exact bytes with your key.", "bold"))
    question = Text(display_text(f"Approve {doc.get('dataset')} (release.json SHA-256 "
                                 f"{sha[:16]}...) with reviewer key {kid}?"))
    if not args.yes and not Confirm.ask(question, default=False, console=con):
        con.print("not approved; nothing was signed")
        return 1
    sig = sign_approval(d, data, args.key)
    con.print(Text(f"approved: wrote {sig}. Decode counts it with --release-key "
                   "<release .pub.pem> --trust <your .pub.pem> --require-approvals 1."))
    return 0


APPROVE = Command(
    name="approve",
    help="sign a reviewed artifact with a reviewer key",
    description="Show a summary of release.json, ask for confirmation, then write your "
                "detached signature over its exact bytes to signatures/<key-id>.sig. Decode "
                "counts it as an approval when your public key is passed with --trust. The "
                "release key cannot approve its own release, and nothing is shown or signed "
                "unless the release key (--release-key) signed these exact bytes.",
    add_arguments=_approve_args,
    run=_approve,
)
