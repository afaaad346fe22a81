"""Should the hybrid LLM decoder rewrite a record's released phrase? (issue 31, item 5)

    python -m benchmarks.paraphrase [--quick] [--rows N] [--json FILE]

A phrase field - short text that repeats - needs a dataset with one, so this one is made from
the demo generator (fictional; no real dataset with short repeated text ships in a PyPI
wheel that we know of): ``demo short`` is the demo with its chief complaint cut to the first
clause (a public function of the text: up to the first comma, " with ", " after ",
" since " or " for "; "low blood sugar, slurring words" -> "low blood sugar"), its schema
without ``examples`` and with ``maxLength`` 64, so the field is released as *phrases*
(whole normalised texts) by OpenDP's partition selection. A complaint longer than 64
characters is dropped (the dataset's definition, before any release).

One counts-only release (``fixed``, epsilon 2, person unit as examples/release.toml) of
20,000 members (64 phrases, the most a field may release, cover about a third of the
texts), decoded by the ``model`` decoder and by the hybrid ``llm`` decoder twice on
the same ``--rows`` fields (seeds 0 and 1): keeping a record's released phrase (the default) and
with ``paraphrase_phrases`` (the LLM rewrites it, prompted with it). Each is scored as
`benchmarks.text_vocabulary` scores decoders: text-only TSTR (next to a real sample of the
same size), distinct share, share of texts that are released phrases, copies of a member
text that is not a released phrase, record TSTR with the text and blanked. Paraphrase
should be the default only if it raises the distinct share without lowering text TSTR.
``--quick``: 6,000 members (at 2,000 no phrase clears the threshold), `QUICK_LLM_ROWS` LLM rows,
the model decoder's 1,000 rows scored (not one per member).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import command
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FIELD = "chief_complaint"
SEEDS = (0, 1)
KEEP, PARAPHRASE = "llm: keep phrases", "llm: paraphrase phrases"
MAX_LENGTH = 64
_CLAUSE = re.compile(r",| with | after | since | for ")


def short_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Demo rows with the complaint cut to its first clause; rows whose clause is longer
    than `MAX_LENGTH` dropped."""
    from selpe_audit.demo.generator import generate_rows

    rows = [{**r, FIELD: _CLAUSE.split(r[FIELD])[0].strip()} for r in generate_rows(n, seed)]
    return [r for r in rows if 0 < len(r[FIELD]) <= MAX_LENGTH]


def _schema(folder: Path) -> Path:
    from benchmarks.text_vocabulary import bare_demo_schema

    path = bare_demo_schema(folder)
    raw = json.loads(path.read_text())
    raw["properties"][FIELD]["maxLength"] = MAX_LENGTH
    raw["properties"][FIELD]["minLength"] = 1
    out = folder / "demo-short.schema.json"
    out.write_text(json.dumps(raw))
    return out


QUICK_LLM_ROWS = 4


def run(quick: bool = False, rows: int = 400) -> dict[str, Any]:
    import polars as pl

    from benchmarks.text_vocabulary import counts_release, decode_rows, score_rows
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import load_schema

    n, n_test, rows = (6_000, 600, QUICK_LLM_ROWS) if quick else (20_000, 1_500, rows)
    members, test = short_rows(n, 101), short_rows(n_test, 202)
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        schema_path = _schema(base)
        schema = load_schema(schema_path)
        data = base / "members.csv"
        pl.DataFrame(members).write_csv(data)
        key, trust, _ = generate_keypair(base / "k.pem")
        doc, release_s, out = counts_release(base, data, schema_path, key, True, True)
        runs = [("model", "model", False, min(len(members), 1_000) if quick else len(members),
                 0)] + [
            (label, "llm", paraphrase, rows, seed) for seed in SEEDS
            for label, paraphrase in ((KEEP, False), (PARAPHRASE, True))]
        for label, decoder, paraphrase, size, seed in runs:
            t0 = time.perf_counter()
            syn = decode_rows(out, trust, size, decoder, seed, base / f"{label}-{seed}.csv",
                              schema, paraphrase)
            seconds = time.perf_counter() - t0
            lines.append({"decode": label, "seed": seed, "rows": size,
                          "decode_s": round(seconds, 1),
                          **score_rows(schema, syn, members, test, doc, seed)})
            print(f"{label} seed {seed}: text TSTR {lines[-1]['text_tstr']:.3f}, distinct "
                  f"{lines[-1]['distinct_share']:.2f}", flush=True)
    keep, para = _mean(lines, KEEP), _mean(lines, PARAPHRASE)
    verdict = (para["distinct_share"] > keep["distinct_share"]
               and para["text_tstr"] >= keep["text_tstr"] - 0.005)
    return {"members": len(members), "release_s": round(release_s, 1),
            "phrases": lines[0]["terms"], "coverage": lines[0]["coverage"], "runs": lines,
            "keep": keep, "paraphrase": para, "paraphrase_helps": verdict,
            "table": _table(lines), "summary": _summary(lines[0], keep, para, verdict)}


def _mean(lines: list[dict[str, Any]], label: str) -> dict[str, float]:
    """The LLM runs of one kind, averaged over the seeds."""
    runs = [x for x in lines if x["decode"] == label]
    keys = ("text_tstr", "text_tstr_real", "distinct_share", "released_term_share")
    out = {k: statistics.fmean(x[k] for x in runs) for k in keys}
    for side in ("record_with_text", "record_blanked"):
        out |= {f"{side}_{m}": statistics.fmean(x[side][m] for x in runs) for m in ("lr", "gb")}
    return out


def _table(lines: list[dict[str, Any]]) -> str:
    head = ("| decode | seed | rows | text TSTR | real text | distinct | released phrases | "
            "private copies | LR with text / blanked | GB with text / blanked | decode s |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for x in lines:
        w, b = x["record_with_text"], x["record_blanked"]
        out.append(f"| {x['decode']} | {x['seed']} | {x['rows']:,} | {x['text_tstr']:.3f} | "
                   f"{x['text_tstr_real']:.3f} | {x['distinct_share']:.3f} | "
                   f"{x['released_term_share']:.3f} | {x['private_copy_share']:.3f} | "
                   f"{w['lr']:.3f} / {b['lr']:.3f} | {w['gb']:.3f} / {b['gb']:.3f} | "
                   f"{x['decode_s']} |")
    return "\n".join(out)


def _summary(m: dict[str, Any], keep: dict[str, float], para: dict[str, float],
             verdict: bool) -> str:
    return (f"Demo short complaints (phrases), epsilon 2: {m['terms']} phrases released, "
            f"covering {m['coverage']:.0%} of the members' texts. LLM (mean of "
            f"{len(SEEDS)} seeds) keeping the released phrase: text TSTR "
            f"{keep['text_tstr']:.3f}, distinct {keep['distinct_share']:.2f}, GB with text "
            f"{keep['record_with_text_gb']:.3f} (blanked {keep['record_blanked_gb']:.3f}); "
            f"paraphrasing it: {para['text_tstr']:.3f}, {para['distinct_share']:.2f}, "
            f"{para['record_with_text_gb']:.3f} ({para['record_blanked_gb']:.3f}) -> "
            + ("paraphrase helps (distinct up, text TSTR not down)." if verdict else
               "paraphrase does not help (distinct share not up, or text TSTR down): off by "
               "default."))


def main() -> None:
    p = command.parser(__doc__)
    p.add_argument("--rows", type=int, default=400, help="LLM rows per decode")
    a = p.parse_args()
    command.finish(run(a.quick, a.rows), a.json)


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    main()
