"""Small private tables: the default release next to smartnoise-synth's AIM and MST, 400 rows up.

    python -m benchmarks --only small_tables [--quick] [--set datasets=demo] [--set peers=mst]

Datasets (members / test rows):

- ``demo``: the demo generator's rows at n = 400, 1,000, 3,000 and 20,000 (seed n; 2,000
  test rows, seed 7), on the default path (`release --data --schema`: the bundled schema,
  the person unit by its ``x-id``, one row per person);
- ``adult``: UCI Adult (`benchmarks.adult`): seeded subsamples of 500 and 2,000 training rows
  and all 26,048; the 6,513 test rows; the row unit.

Per dataset and size, `RELEASES` releases on the default path at epsilon 2, each decoded by
the ``model`` decoder (as many rows as members), and as many runs of smartnoise-synth's AIM
and MST at the same epsilon over the same public bins (`benchmarks.smartnoise_peer`, their
own venv; free text dropped): AIM not on the full Adult (`AIM_MAX_ROWS`: an AIM run took
7-16 minutes at 2,000 Adult rows on 2 shared cores); ``--set peers=mst`` runs one of them
(with ``BENCH_RESUME``, the other's runs later). Every side is scored with its text blanked by both
evaluators (`benchmarks.common.record_gaps`: the record evaluator's LR and gradient boosting,
the standard tabular one's one-hot LR and native-categorical gradient boosting), as gaps to a
same-size real sample of the members.

Its demo rows are what ``selpe-audit demo`` quotes next to its own numbers, through
`selpe_audit/data/expected_gaps.json` (`make expected-gaps` writes it from RESULTS.json,
`benchmarks.expected_gaps`). ``BENCH_RESUME=DIR`` keeps every finished run in
``DIR/small_tables/runs.jsonl`` and skips it when run again (`benchmarks.common.RunCache`;
``BENCH_CACHED_ONLY=1``: the tables from those alone), so an interrupted run of several
hours loses one run at most. ``--quick``: demo at 400 rows,
one release and one run of each peer. A peer that fails (its venv not built by `make peers`, or
its run exiting with an error) is a failed cell with its error in the table and the result's
``failed``, never a row left out.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RunCache, aggregate, cell, decode, record_gaps, release
from benchmarks.suite import Benchmark

os.environ.setdefault("HF_HUB_OFFLINE", "1")

EPSILON = 2.0
DEMO_SIZES = (400, 1_000, 3_000, 20_000)
ADULT_SIZES = (500, 2_000, None)  # None: every training row
RELEASES = 5  # and as many runs of each peer (with BENCH_RESUME, several sessions fill them in)
AIM_MAX_ROWS = 20_000  # the full Adult above: AIM took 7-16 minutes a run at 2,000 Adult rows
KEYS = ("dataset", "n", "synthesizer", "run")  # one run
LARGE = 10_000  # the tables run last
TEST_ROWS = 2_000
PEERS = ("aim", "mst")
SCORES = ("lr", "gb", "std_lr", "std_gb")
EXPECTED = Path(__file__).resolve().parents[1] / "selpe_audit" / "data" / "expected_gaps.json"


def _demo(n: int, test_rows: int) -> tuple[list, list, Path]:
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.schema import demo_schema_path

    return generate_rows(n, seed=n), generate_rows(test_rows, seed=7), demo_schema_path()


def _adult(n: int | None) -> tuple[list, list, Path]:
    import numpy as np

    from benchmarks import adult

    train, test, schema_path = adult.load()
    members = train.to_dicts()
    if n is not None:
        pick = np.sort(np.random.default_rng(n).choice(len(members), n, replace=False))
        members = [members[i] for i in pick.tolist()]
    return members, test.to_dicts(), schema_path


def _typed(schema: Any, rows: list[dict]) -> list[dict]:
    """Rows as a decode reads them back (numbers as floats), so both sides score alike."""
    from benchmarks.common import typed_rows

    return typed_rows(schema, [{k: None if v is None else str(v) for k, v in r.items()}
                               for r in rows])


def _case(base: Path, dataset: str, members: list, test: list, schema_path: Path,
          releases: int, peers: tuple[str, ...], runs: RunCache) -> list[dict[str, Any]]:
    """Every release and peer run on one dataset size not yet in ``runs``; the peer runs
    that failed, each with its error (a failed cell: not cached, so a rerun tries again)."""
    import polars as pl

    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.schema import load_schema

    schema = load_schema(schema_path)
    n = len(members)
    folder = base / f"{dataset}-{n}"
    folder.mkdir(exist_ok=True)
    data = folder / "members.csv"
    pl.DataFrame(members).write_csv(data)
    key, trust, _ = generate_keypair(folder / "k.pem")
    typed_members, typed_test = _typed(schema, members), _typed(schema, test)
    for i in range(releases):
        if not runs.wanted(dataset, n, "ours", i):
            continue
        sub = folder / f"ours-{i}"
        sub.mkdir(exist_ok=True)
        rel = release(sub, data, schema_path, key, {"epsilon": EPSILON})
        syn = decode(rel.out, trust, n, "model", i, sub / "model.csv", schema)
        _say(runs.add({"dataset": dataset, "n": n, "synthesizer": "ours", "run": i,
                       "seconds": rel.seconds,
                       "gaps": record_gaps(schema, syn, typed_members, typed_test, i, False)}))
    failed = []
    for synth in peers:
        for i in range(releases if synth != "aim" or n <= AIM_MAX_ROWS else 0):
            line = peer_run(runs, folder, schema, dataset, members, synth, i,
                            (typed_members, typed_test))
            if line is not None and "error" in line:
                failed.append(line)
                break  # its other runs would fail alike
    return failed


def peer_run(runs: RunCache, folder: Path, schema: Any, dataset: str, members: list[dict],
             synth: str, i: int, scored_on: tuple[list, list]) -> dict[str, Any] | None:
    """Run ``i`` of a smartnoise peer, scored and cached; a failure is a line with its
    error (never cached), and None where the cache already has the run."""
    from benchmarks.smartnoise_peer import PeerFailed, run_peer

    n, name = len(members), f"smartnoise {synth}"
    if not runs.wanted(dataset, n, name, i):
        return None
    t0 = time.perf_counter()
    try:
        syn = run_peer(schema, members, synth, EPSILON, n, folder, i)
    except PeerFailed as e:
        print(f"{dataset} {n} {name} {i + 1}: FAILED: {e}", flush=True)
        return {"dataset": dataset, "n": n, "synthesizer": name, "run": i, "error": str(e)}
    line = runs.add({"dataset": dataset, "n": n, "synthesizer": name, "run": i,
                     "seconds": time.perf_counter() - t0,
                     "gaps": record_gaps(schema, _typed(schema, syn), *scored_on, i, False)})
    _say(line)
    return line


def _say(line: dict[str, Any]) -> None:
    g = line["gaps"]
    print(f"{line['dataset']} {line['n']} {line['synthesizer']} {line['run'] + 1}: "
          f"gap LR {g['lr']:.3f} GB {g['gb']:.3f} ({line['seconds']:.0f} s)", flush=True)


def _cases(quick: bool, datasets: tuple[str, ...]) -> list[tuple[str, int | None]]:
    """Smallest first, and the slow largest tables last."""
    if quick:
        return [("demo", DEMO_SIZES[0])]
    small = [("demo", n) for n in DEMO_SIZES if n <= LARGE] + \
        [("adult", n) for n in ADULT_SIZES if n is not None and n <= LARGE]
    large = [("demo", n) for n in DEMO_SIZES if n > LARGE] + \
        [("adult", n) for n in ADULT_SIZES if n is None or n > LARGE]
    return [c for c in small + large if c[0] in datasets]


def run(quick: bool = False, datasets: tuple[str, ...] = ("demo", "adult"),
        runs: RunCache | None = None, peers: tuple[str, ...] = PEERS) -> dict[str, Any]:
    releases = 1 if quick else RELEASES
    runs = runs or RunCache(None, KEYS)
    failed: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for dataset, n in _cases(quick, datasets):
            if dataset == "demo":
                members, test, schema = _demo(n, 600 if quick else TEST_ROWS)
            else:
                members, test, schema = _adult(n)
            failed += _case(base, dataset, members, test, schema, releases, peers, runs)
    lines = sorted(runs.done.values(), key=lambda x: (
        x["n"] > LARGE, x["dataset"] != "demo", x["n"], x["synthesizer"] != "ours",
        x["synthesizer"], x["run"]))
    results = aggregate([{k: v for k, v in x.items() if k != "run"} for x in lines],
                        ("dataset", "n", "synthesizer"))
    out = {"epsilon": EPSILON, "results": results, "failed": failed,
           "table": _table(results, failed), "summary": _summary(results, failed)}
    return out


def _table(results: list[dict[str, Any]], failed: list[dict[str, Any]]) -> str:
    head = ("| dataset | n | synthesizer | runs | LR gap | GB gap | one-hot LR gap | "
            "native GB gap | real LR / GB | seconds |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        g = r["gaps"]
        rows.append(f"| {r['dataset']} | {r['n']:,} | {r['synthesizer']} | {r['runs']} | "
                    + " | ".join(cell(g[k]) for k in SCORES)
                    + f" | {g['real_lr']['mean']:.3f} / {g['real_gb']['mean']:.3f} | "
                    f"{cell(r['seconds'], 0)} |")
    for f in failed:  # a failed cell, its error in place of the numbers
        error = f["error"].replace("|", "/")
        rows.append(f"| {f['dataset']} | {f['n']:,} | {f['synthesizer']} | FAILED (run "
                    f"{f['run'] + 1}) | {error} |" + " |" * (head.count("|") - 6))
    return "\n".join(rows)


def _summary(results: list[dict[str, Any]], failed: list[dict[str, Any]]) -> str:
    """Per size: ours against the better peer, on the record evaluator; failed peers."""
    by: dict[tuple, dict[str, Any]] = {}
    for r in results:
        by.setdefault((r["dataset"], r["n"]), {})[r["synthesizer"]] = r["gaps"]
    parts = []
    for (dataset, n), got in by.items():
        ours = got.get("ours")
        peers = {k: v for k, v in got.items() if k != "ours"}
        if ours is None:
            continue
        text = f"{dataset} {n:,}: ours {ours['lr']['mean']:.3f}/{ours['gb']['mean']:.3f}"
        if peers:
            name, best = min(peers.items(), key=lambda kv: kv[1]["lr"]["mean"]
                             + kv[1]["gb"]["mean"])
            text += f" vs {name.split()[-1].upper()} {best['lr']['mean']:.3f}/" \
                    f"{best['gb']['mean']:.3f}"
        parts.append(text)
    failures = "".join(f" FAILED: {f['synthesizer']} at {f['dataset']} {f['n']:,}."
                       for f in failed)
    return ("Epsilon 2, text blanked, LR/GB TSTR gap (mean of releases): " + "; ".join(parts)
            + "." + failures)


def plots(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Gap against n on the demo, ours next to each peer (LR and GB), as (stem, caption,
    svg)."""
    from benchmarks.svg import line_chart

    demo = [r for r in result["results"] if r["dataset"] == "demo"]
    sizes = sorted({r["n"] for r in demo})
    series: dict[str, list[float | None]] = {}
    color, dashed = {}, []
    for k, (synth, label) in enumerate((("ours", "ours"), ("smartnoise aim", "AIM"),
                                        ("smartnoise mst", "MST"))):
        by_n = {r["n"]: r["gaps"] for r in demo if r["synthesizer"] == synth}
        for metric in ("lr", "gb"):
            name = f"{label} {metric.upper()}"
            series[name] = [by_n[n][metric]["mean"] if n in by_n else None for n in sizes]
            color[name] = k
            if metric == "gb":
                dashed.append(name)
    svg = line_chart("Demo: TSTR gap against table size (epsilon 2, text blanked)",
                     [f"{n:,}" for n in sizes], series, "gap (real minus synthetic AUC)",
                     color_of=color, dashed=dashed)
    return [("gap", "TSTR gap against n, ours and the peers", svg)]


def suite_run(quick: bool = False, datasets: str | tuple[str, ...] = ("demo", "adult"),
              peers: str | tuple[str, ...] = PEERS) -> dict[str, Any]:
    """`run` as the suite runs it: finished runs kept under ``$BENCH_RESUME`` (a rerun does
    only the rest; ``BENCH_CACHED_ONLY=1``: the tables from them alone); ``datasets`` and
    ``peers`` as names or comma-separated (``--set peers=mst``)."""
    names = {k: tuple(v.split(",")) if isinstance(v, str) else tuple(v)
             for k, v in (("datasets", datasets), ("peers", peers))}
    if set(names["peers"]) - set(PEERS):
        raise ValueError(f"peers: choose from {', '.join(PEERS)}")
    return run(quick, names["datasets"], RunCache.from_env("small_tables", KEYS),
               names["peers"])


BENCHMARK = Benchmark("small_tables", suite_run, plots=plots)
