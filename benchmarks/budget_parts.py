"""What each part of the release buys the decoded records and their text, at four table sizes.

    python -m benchmarks.budget_parts [--quick] [--json FILE]

The demo generator's rows (n = 400, 1,000, 3,000, 20,000 members; 2,000 other rows as the
test set), released at epsilon 2 on the default path (`release --data --schema`: the
bundled schema, the person unit by its ``x-id``, one row per person), decoded by the
``model`` decoder (as many rows as members). Each part's epsilon against what the same
epsilon buys when the counts get it:

- ``default``: the release's defaults (the plan sizes the parts to the table; no selection);
- ``+ selection``: half of epsilon on the SelPE selection of exemplars among LLM candidates
  (the split the release had before the plan);
- ``vocabulary forced`` / ``vocabulary off``: the DP keyword vocabulary run whatever the
  plan says (``phrases = true``), and not at all (each only where the plan's own choice
  differs: forced where the plan would skip it, off where it runs it);
- ``public bins``: every field with the class over its public bins (``signal_sigmas`` 0:
  the workload before sizing);
- ``+ cohorts, rates``: the demo configuration's two cohorts and one rate (gamma and alpha
  0.2 of the counts);
- ``+ topics``: a public topic codebook of `TOPICS` anchors per free-text field, built from
  LLM candidates of the schema (``topics = 8``), its topic x class marginal measured with
  the other counts (the text's label signal where the vocabulary cannot run);
- ``before``: the release as it was before the plan (half on selection, the vocabulary
  whatever the table's size, public bins).

The configurations with LLM candidates (selection, topics) run up to `SELECTION_ROWS` rows.

And ``reviews``: 600 Rotten Tomatoes review snippets (`benchmarks.reviews`: real, long,
sentiment-laden text; the row unit), in the default, ``+ selection``, ``+ topics`` and ``before``
releases, `REVIEW_RELEASES` each: where the vocabulary can release nothing, the text must
stay neutral.

Scored against the test rows: record TSTR gaps to a same-size real sample with the text
blanked (`benchmarks.common.record_gaps`: LR and gradient boosting), what the synthetic text
adds to its records' AUC (with the text minus blanked: never below 0), text-only
TSTR (`audits.text_quality.text_tstr`), 1-way and 2-way TVD (`audits.fidelity.tvds`). And,
on the default, ``+ topics`` and ``before`` releases at 400 rows, the ``llm`` decoder's
text-only TSTR (`LLM_ROWS` rows; the bundled model on the CPU): what the exemplars and the
vocabulary bought the LLM's text before, against what it writes now.

Reported: mean and range over `RELEASES` per size. ``--quick``: 400 rows, one release each,
the default, ``+ selection`` and ``before``, no LLM.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import command
from benchmarks.common import (
    RunCache,
    aggregate,
    cell,
    decode,
    record_gaps,
    release,
    released_phrases,
)
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

EPSILON = 2.0
SIZES = (400, 1_000, 3_000, 20_000)
RELEASES = {400: 3, 1_000: 2, 3_000: 2, 20_000: 1}
#: above this many rows the configurations with LLM candidates are left out (the candidates
#: and the private features or topic codes of every row take most of an hour on 2 cores)
SELECTION_ROWS = 3_000
KEYS = ("dataset", "n", "config", "run")  # one release
TEST_ROWS = 2_000
REVIEW_ROWS = 600  # a small table of long real text, where the vocabulary releases little
REVIEW_CONFIGS = ("default", "+ selection", "+ topics", "before")
REVIEW_RELEASES = 2
LLM_SIZES = (400,)  # the bundled model on 2 cores: 200 records take 5-20 minutes
LLM_CONFIGS = ("default", "+ topics", "before")
LLM_ROWS = 200
LLM_RELEASES = 1
SELECTION = {"counts_share": 0.5, "selection_share": 0.5}
TOPICS = 8
COHORTS_AND_RATES = "cohorts_and_rates"  # the demo configuration's [[cohorts]] and [[rates]]
#: name -> settings
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "+ selection": SELECTION,
    "vocabulary forced": {"phrases": True},
    "vocabulary off": {"phrases": False},
    "public bins": {"signal_sigmas": 0.0},
    "+ cohorts, rates": {COHORTS_AND_RATES: True},
    "+ topics": {"topics": TOPICS},
    "before": {**SELECTION, "signal_sigmas": 0.0, "phrases": True},
}
QUICK_CONFIGS = ("default", "+ selection", "before")


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Flat release settings; the demo configuration's cohorts and rates when asked."""
    out = {"epsilon": EPSILON, **{k: v for k, v in settings.items() if k != COHORTS_AND_RATES}}
    if settings.get(COHORTS_AND_RATES):
        import selpe_audit
        from release.config_file import load_config

        demo = load_config(Path(selpe_audit.__file__).parent / "data" / "demo_release.toml",
                           {"data": "x.csv", "schema": "x.json", "release_key": "k.pem"})
        out |= {"cohorts": demo.counts.cohorts, "rates": demo.counts.rates}
    return out


def _candidates(config: str) -> bool:
    """Whether the configuration writes LLM candidates (for selection or a topic codebook)."""
    return bool(CONFIGS[config].get("selection_share") or CONFIGS[config].get("topics"))


def _same_as_default(n: int) -> str:
    """The vocabulary configuration that is the default's own at ``n`` rows, as the release's
    plan decides it for a table of that size."""
    from release.config_file import load_config
    from release.dp.counts import NoisyCount
    from release.plan import plan_release
    from selpe_audit.schema import demo_schema_path, load_schema

    cfg = load_config(None, {"data": "x.csv", "schema": demo_schema_path(),
                             "release_key": "k.pem", "epsilon": EPSILON})
    plan = plan_release(cfg, load_schema(cfg.schema), NoisyCount(n, "", 0.0, 0.0))
    return "vocabulary forced" if plan.vocabulary_fields else "vocabulary off"


def _one(folder: Path, data: Path, schema_path: Path, schema: Any, key: Path, trust: Path,
         members: list, test: list, config: str, seed: int, llm: bool) -> dict[str, Any]:
    """One release in ``config``, decoded and scored."""
    from audits.fidelity import tvds
    from audits.text_quality import text_tstr

    rel = release(folder, data, schema_path, key, _settings(CONFIGS[config]))
    syn = decode(rel.out, trust, len(members), "model", seed, folder / "model.csv", schema)
    text = schema.by_kind("text")[0].name
    fields = list(schema.record_fields)
    tv = tvds(schema, syn, members, fields)
    line = {"config": config, "n": len(members), "release_s": rel.seconds,
            "gaps": record_gaps(schema, syn, members, test, seed),
            "text_tstr": text_tstr(schema, text, syn, test, seed)["macro_auc"],
            "tvd_1way": tv["mean_1way"], "tvd_2way": tv["mean_2way"],
            "terms": len(released_phrases(rel.doc, text))}
    if llm:
        got = decode(rel.out, trust, LLM_ROWS, "llm", seed, folder / "llm.csv", schema)
        line["llm_text_tstr"] = text_tstr(schema, text, got, test, seed)["macro_auc"]
    return line


def run(quick: bool = False, runs: RunCache | None = None) -> dict[str, Any]:
    import polars as pl

    from benchmarks import reviews
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.schema import demo_schema_path, load_schema

    sizes = SIZES[:1] if quick else SIZES
    configs = QUICK_CONFIGS if quick else tuple(CONFIGS)
    runs = runs or RunCache(None, KEYS)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        key, trust, _ = generate_keypair(base / "k.pem")
        cases = [("demo", demo_schema_path(), generate_rows(n, seed=n),
                  generate_rows(600 if quick else TEST_ROWS, seed=7),
                  tuple(c for c in configs if c != _same_as_default(n)
                        and not (n > SELECTION_ROWS and _candidates(c))),
                  1 if quick else RELEASES[n]) for n in sizes]
        if not quick:  # before the largest table, whose releases take longest
            members, test = reviews.split()
            cases.insert(len(cases) - 1, (
                "reviews", reviews.write_schema(base / "reviews.schema.json"),
                members[:REVIEW_ROWS], test[:TEST_ROWS], REVIEW_CONFIGS, REVIEW_RELEASES))
        for k, (dataset, schema_path, members, test, names, releases) in enumerate(cases):
            schema = load_schema(schema_path)
            data = base / f"members-{k}.csv"
            pl.DataFrame(members).write_csv(data)
            for config in names:
                for i in range(releases):
                    if not runs.wanted(dataset, len(members), config, i):
                        continue
                    llm = (not quick and dataset == "demo" and i < LLM_RELEASES
                           and len(members) in LLM_SIZES and config in LLM_CONFIGS)
                    folder = base / f"{k}-{names.index(config)}-{i}"
                    folder.mkdir()
                    line = runs.add({"dataset": dataset, "run": i, **_one(
                        folder, data, schema_path, schema, key, trust, members, test, config, i,
                        llm)})
                    g = line["gaps"]
                    print(f"{dataset} {len(members)} {config} {i + 1}: gap LR "
                          f"{g['lr']:.3f} GB {g['gb']:.3f}", flush=True)
    order = {c: k for k, c in enumerate(CONFIGS)}
    lines = sorted(runs.done.values(), key=lambda x: (x["dataset"] != "demo", x["n"],
                                                      order[x["config"]], x["run"]))
    results = aggregate([{k: v for k, v in x.items() if k != "run"} for x in lines],
                        ("dataset", "n", "config"))
    return {"epsilon": EPSILON, "results": results, "table": _table(results),
            "summary": _summary(results)}


def _table(results: list[dict[str, Any]]) -> str:
    head = ("| dataset | n | release | runs | LR gap | GB gap | text adds LR / GB | "
            "text TSTR (model) | text TSTR (llm) | TVD 1-way | TVD 2-way | terms | release s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        g = r["gaps"]
        rows.append(
            f"| {r['dataset']} | {r['n']:,} | {r['config']} | {r['runs']} | {cell(g['lr'])} | "
            f"{cell(g['gb'])} | "
            f"{cell(g.get('text_gain_lr'))} / {cell(g.get('text_gain_gb'))} | "
            f"{cell(r['text_tstr'])} | {cell(r.get('llm_text_tstr'))} | "
            f"{cell(r['tvd_1way'])} | {cell(r['tvd_2way'])} | {cell(r['terms'], 1)} | "
            f"{cell(r['release_s'], 1)} |")
    return "\n".join(rows)


def _summary(results: list[dict[str, Any]]) -> str:
    by = {(r["dataset"], r["n"], r["config"]): r for r in results}
    parts = []
    for dataset, n in sorted({(r["dataset"], r["n"]) for r in results}):
        d, s = by.get((dataset, n, "default")), by.get((dataset, n, "+ selection"))
        if d is None or s is None:
            continue
        parts.append(f"{dataset} {n:,}: default LR/GB gap {d['gaps']['lr']['mean']:.3f}/"
                     f"{d['gaps']['gb']['mean']:.3f}, with half on selection "
                     f"{s['gaps']['lr']['mean']:.3f}/{s['gaps']['gb']['mean']:.3f}")
    return "Model decoder, epsilon 2, text blanked: " + "; ".join(parts) + "."


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    command.main(__doc__, run)
