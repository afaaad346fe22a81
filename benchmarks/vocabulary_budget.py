"""How much of the release's epsilon the DP text vocabulary should get, and how far text
can go at epsilon 2 with it (issue 31).

    python -m benchmarks.vocabulary_budget [--quick] [--json FILE]

Two parts, on the datasets of `benchmarks.text_vocabulary` (demo: 3,000 members, its schema
without ``examples``, person unit; reviews: Rotten Tomatoes snippets, 10,246 members, row
unit); DP noise is never seeded, so each release is a fresh draw:

- **share**: counts-only releases at epsilon 2 (``fixed``, as the default path's counts)
  with ``phrase_share`` 0.2, 0.4 and 0.6, decoded by the ``model`` decoder (as many rows as
  members) and scored as `benchmarks.text_vocabulary` scores them: text-only TSTR next to
  real text and the vocabulary's ceiling, and record TSTR with the text and blanked. A larger
  share buys text and costs the other fields; this is the trade-off the default is set by.
  On the demo also two ``keyword_slots`` at shares 0.2 and 0.4 (two keywords per record).
- **ceiling**: the vocabulary alone (`release.phrases.release_phrases`, keywords) at
  epsilon 2 x share for shares up to 1 - the whole release spent on the text - and the
  text-only TSTR of real texts cut down to the released keywords (the most any decoder that
  writes released terms can reach). Where that stays more than 0.05 below real text, no
  share of epsilon 2 meets issue 31's text target with this mechanism. One keyword per unit
  (the default ``keywords_per_unit``) at every share; at shares 0.2 and 1 also 4 per unit:
  a unit's text says more than its first keyword, but OpenDP's threshold grows with the
  terms a unit may count for.

Reported: mean and range over the releases (share: demo 3, reviews 2; ceiling: 2 each).
``--quick``: demo only at 1,500 / 600 rows, one release per share, shares 0.2 and 0.4; the
ceiling at share 0.2 only, one and four keywords per unit, one release each.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import command
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

EPSILON = 2.0
SHARES = (0.2, 0.4, 0.6)
SLOTS = ((0.2, 2), (0.4, 2))  # (share, keyword_slots): more keywords per record (demo)
CEILING_SHARES = (0.2, 0.4, 0.6, 1.0)
#: (share, keywords_per_unit) of the ceiling part: one keyword per unit at every share, then
#: more per unit where the default and the whole epsilon lie
CEILING_GRID = (*((s, 1) for s in CEILING_SHARES), (0.2, 4), (1.0, 4))
QUICK_CEILING_GRID = ((0.2, 1), (0.2, 4))
DELTA = 5e-7  # half the counts' default delta (1e-6), as the release gives the vocabulary


def _datasets(base: Path, quick: bool) -> list[tuple[str, Path, list, list, bool, int]]:
    """(name, schema path, members, test rows, person unit, releases) per dataset."""
    from benchmarks import reviews
    from benchmarks.text_vocabulary import bare_demo_schema
    from selpe_audit.demo.generator import generate_rows

    n, n_test = (1_500, 600) if quick else (3_000, 1_500)
    out = [("demo", bare_demo_schema(base), generate_rows(n, seed=101),
            generate_rows(n_test, seed=202), True, 1 if quick else 3)]
    if not quick:
        members, test = reviews.split()
        out.append(("reviews", reviews.write_schema(base / "reviews.schema.json"), members,
                    test, False, 2))
    return out


def _ceiling(name: str, schema_path: Path, members: list, test: list, person: bool,
             share: float, per_unit: int, seed: int) -> dict[str, Any]:
    """One vocabulary release at epsilon 2 x ``share``, ``per_unit`` keywords per unit, and
    the text TSTR it allows."""
    import polars as pl

    from audits.text_quality import text_tstr
    from audits.utility import real_sample_like
    from release.dp.unit import PrivacyUnit
    from release.phrases import release_phrases, term_kind, terms
    from selpe_audit.schema import load_schema

    schema = load_schema(schema_path)
    field = schema.by_kind("text")[0]
    kind = term_kind(field.max_length)
    unit = PrivacyUnit("patient_id", 2) if person else PrivacyUnit()  # examples/release.toml
    ids = pl.Series([r["patient_id"] for r in members]) if person else None
    v = release_phrases(field.name, pl.Series([r[field.name] for r in members]), unit, ids,
                        EPSILON * share, DELTA, per_unit, 10_000, kind)
    released = set(v.phrases)
    real = real_sample_like(members, len(members), seed)
    cut = [{**r, field.name: " ".join(t for t in terms(r[field.name], kind) if t in released)}
           for r in real]
    return {"dataset": name, "share": share, "epsilon": EPSILON * share,
            "per_unit": per_unit, "threshold": v.threshold, "terms": len(v.phrases),
            "coverage": sum(any(t in released for t in terms(r[field.name], kind))
                            for r in members) / len(members),
            "ceiling": text_tstr(schema, field.name, cut, test, seed)["macro_auc"],
            "real": text_tstr(schema, field.name, real, test, seed)["macro_auc"]}


def run(quick: bool = False) -> dict[str, Any]:
    from benchmarks.text_vocabulary import aggregate, run_case, stats

    shares = SHARES[:2] if quick else SHARES
    lines: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for name, schema, members, test, person, releases in _datasets(base, quick):
            grid = [(s, 1) for s in shares] + list(SLOTS if name == "demo" and not quick
                                                   else ())
            for share, slots in grid:
                got = run_case(base / f"{name}-{share}-{slots}", name, schema, members, test,
                               person, releases, decoders=("model",), vocabulary=(True,),
                               extra={"phrase_share": share, "keyword_slots": slots})
                lines += [{**g, "decoder": f"model, share {share:g}, slots {slots}"}
                          for g in got]
            for share, per_unit in QUICK_CEILING_GRID if quick else CEILING_GRID:
                for seed in range(1 if quick else 2):
                    ceilings.append(_ceiling(name, schema, members, test, person, share,
                                             per_unit, seed))
                    print(f"{name} share {share}, {per_unit} per unit: ceiling "
                          f"{ceilings[-1]['ceiling']:.3f}", flush=True)
    results = aggregate(lines)
    groups: dict[tuple, list[dict]] = {}
    for c in ceilings:
        groups.setdefault((c["dataset"], c["share"], c["per_unit"]), []).append(c)
    ceiling = [{"dataset": d, "share": s, "epsilon": EPSILON * s, "per_unit": k,
                **{key: stats([c[key] for c in cs]) for key in
                   ("threshold", "terms", "coverage", "ceiling", "real")}}
               for (d, s, k), cs in groups.items()]
    return {"epsilon": EPSILON, "results": results, "ceiling": ceiling,
            "table": _table(results, ceiling), "summary": _summary(results, ceiling)}


def _setting(r: dict) -> str:
    """"0.2, 1" from the row's decoder label "model, share 0.2, slots 1"."""
    _, share, slots = r["decoder"].split(", ")
    return f"{share.split()[1]}, {slots.split()[1]}"


def _table(results: list[dict], ceiling: list[dict]) -> str:
    from benchmarks.text_vocabulary import cell

    head = ("| dataset | phrase_share, keyword_slots | releases | terms | coverage | "
            "text TSTR | ceiling | real text | LR with text / blanked | GB with text / blanked |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        rows.append(f"| {r['dataset']} | {_setting(r)} | {r['releases']} "
                    f"| {cell(r, 'terms')} | {cell(r, 'coverage')} | {cell(r, 'text_tstr')} | "
                    f"{cell(r, 'text_tstr_ceiling')} | {cell(r, 'text_tstr_real')} | "
                    f"{cell(r, 'record_with_text', 'lr')} / {cell(r, 'record_blanked', 'lr')} | "
                    f"{cell(r, 'record_with_text', 'gb')} / {cell(r, 'record_blanked', 'gb')} |")
    if not ceiling:
        return "\n".join(rows)
    rows += ["", "The vocabulary alone (keywords), epsilon 2 x share:", "",
             "| dataset | share | epsilon | keywords per unit | threshold | terms | coverage "
             "| ceiling | real text |", "|---|---|---|---|---|---|---|---|---|"]
    rows += [f"| {c['dataset']} | {c['share']:g} | {c['epsilon']:g} | {c['per_unit']} | "
             f"{c['threshold']['mean']:g} | {cell(c, 'terms')} | {cell(c, 'coverage')} | "
             f"{cell(c, 'ceiling')} | {cell(c, 'real')} |" for c in ceiling]
    return "\n".join(rows)


def _summary(results: list[dict], ceiling: list[dict]) -> str:
    parts = [f"{r['dataset']} at {_setting(r)}: text TSTR "
             f"{r['text_tstr']['mean']:.3f}, LR blanked {r['record_blanked']['lr']['mean']:.3f}"
             for r in results]
    whole = [f"{c['dataset']} {c['ceiling']['mean']:.3f} against {c['real']['mean']:.3f}"
             + ("" if c["per_unit"] == 1 else f" ({c['per_unit']} keywords per unit)")
             for c in ceiling if c["share"] == 1.0]
    return ("Model decoder, epsilon 2, by phrase_share: " + "; ".join(parts)
            + (". The whole epsilon 2 on the vocabulary gives a ceiling of "
               + ", ".join(whole) if whole else "") + ".")


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    command.main(__doc__, run)
