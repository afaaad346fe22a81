"""Counts modes side by side: marginals, fixed, aim and mst on Adult and on the demo.

    python -m benchmarks --only counts_modes [--quick] [--set modes=marginals,fixed,aim,mst]
        [--set epsilons=1,2,4,inf] [--set parts=adult,demo]

Every release here is counts-only (the whole budget on the counts, row unit on Adult, the
demo's person unit on the demo). The Adult releases each run in a child process
of their own, which reports the release's wall time (``run_release`` only, not the
interpreter start) and its peak resident memory (``getrusage`` of the child: imports
included, so the floor is the ~0.25 GiB of OpenDP, polars and jax).

- Adult (the CoRTeC split, 26,048 train / 6,513 test rows): per mode and epsilon in
  {1, 2, 4, inf} (aim and mst, minutes per release on 2 cores: epsilon 2 only), a
  release, then 26,048 rows decoded - the "marginals" decoder for mode "marginals", the
  "model" decoder for the contingency-table modes - then TSTR on the test rows next to a
  real sample of the same size, with both evaluators of `audits.utility` (this project's
  TF-IDF LR and GB on embeddings; the standard one-hot LR and GB on native categoricals),
  and 1-way TVD per field to the training rows. The release time and peak memory are
  reported per mode at epsilon 2. Two reference rows, no release, show what the class-star
  workload (the class's 2-way marginal with every field) can reach at best: the training
  rows with every field redrawn independently within the class, with exact values, and with
  numbers redrawn uniformly in their schema bin as every decoder here draws them.
- Demo (the bundled 400-row fictional sample; 400 other fictional rows as the real test
  set; the public demo pool for topic anchors): per mode (marginals and fixed: aim and mst
  would take hours over 20 releases), ``releases`` counts-only releases
  at epsilon 2 (fresh noise each), 400 rows decoded from each, TSTR AUC of both logistic
  regressions, and the number of releases in which some class got no decoded row.

The release stages' times, once a third part here, are `benchmarks.scale`'s.

"inf" is a release at epsilon = 1e6 in mode "marginals" and 1000 in the zCDP modes (OpenDP
has no epsilon = infinity, and its zCDP conversion overflows at 1e6). ``--quick`` (the CI
smoke run): Adult's 2,000 / 1,000 head split at epsilon 2 in modes marginals and fixed (aim
and mst take a minute or more even there), one demo release of 120 members in modes
marginals and fixed.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.adult import INF, label, parse_epsilons, release_settings, split_paths
from benchmarks.counts_modes_report import (
    COST_EPSILON,
    TARGETS,
    ZCDP_INF,
    adult_line,
    demo_line,
    plots,
    summary,
    table,
)
from benchmarks.suite import Benchmark
from release.dp import enable as enable_opendp
from selpe_audit import ALLOCATOR_ENV
from selpe_audit.artifact.counts_modes import counts_modes

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(__file__).parent / ".cache" / "demo"
MODES = tuple(d.name for d in counts_modes())


@dataclass(frozen=True)
class Sizes:
    """How big one run is (the full run, or the --quick smoke run)."""

    quick_split: bool            # Adult's 2,000 / 1,000 head split instead of the full one
    epsilons: tuple[float, ...]  # Adult
    modes: tuple[str, ...]       # on Adult
    demo_modes: tuple[str, ...]
    slow_modes_epsilons: tuple[float, ...]  # aim and mst on Adult (minutes per release)
    aim_rounds: int | None       # None: the release's default bound
    demo_members: int            # rows of the bundled sample used (400 = all)
    demo_releases: int


FULL = Sizes(False, (1.0, 2.0, 4.0, INF), MODES, ("marginals", "fixed"), (2.0,), None, 400,
             20)
# no aim or mst in the smoke run (minutes a release on Adult or the demo's full model): every
# registered model mode is released by tests/test_counts_modes.py and audited by the audits
QUICK = Sizes(True, (2.0,), ("marginals", "fixed"), ("marginals", "fixed"), (2.0,), 2, 120, 1)
SLOW_MODES = ("aim", "mst")


# ----- one release in a child process ------------------------------------------------------

def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child: one release; its wall time and this process's peak RSS."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release

    cfg = load_config(spec.get("config"), spec["overrides"])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    doc = run_release(cfg, installation=Installation.for_experiments("benchmark")).doc
    seconds = time.perf_counter() - t0
    counts = doc.get("counts") or {}
    return {"seconds": round(seconds, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "rss_after_imports_mib": round(rss_before, 1),
            "mode": counts.get("mode", "marginals")}


def release_child(overrides: dict[str, Any], config: Path | None = None,
                  timeout: float = 7200) -> dict[str, Any]:
    """One release in a fresh interpreter (wall time and peak memory of that release alone);
    raises with the child's last output when it fails."""
    spec = {"config": None if config is None else str(config),
            "overrides": {k: str(v) if isinstance(v, Path) else v
                          for k, v in overrides.items()}}
    r = subprocess.run([sys.executable, "-m", "benchmarks.counts_modes", "--child",
                        json.dumps(spec)], capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT, env={**ALLOCATOR_ENV, **os.environ, "NO_COLOR": "1"})
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = [line.strip() for line in r.stderr.splitlines() if line.strip()][-3:]
        raise RuntimeError(f"release failed: {' / '.join(tail) or '(no output)'}")
    return json.loads(lines[-1])


# ----- decode and score ----------------------------------------------------------------------

def decoder_for(mode: str) -> str:
    """The marginals decoder for mode "marginals", the model decoder for the others."""
    return "marginals" if mode == "marginals" else "model"


def decode(artifact: Path, trust: Path, out: Path, n: int, decoder: str,
           seed: int = 0) -> float:
    """``n`` rows from the artifact into ``out``; the decode's wall time."""
    from decode.pipeline import DecodeSettings, run_decode

    t0 = time.perf_counter()
    run_decode(artifact, [trust], 0, out, DecodeSettings(n=n, decoder=decoder, seed=seed))
    return time.perf_counter() - t0


def _auc(u: dict[str, Any]) -> dict[str, Any]:
    return {m: {"synthetic": v["synthetic"]["macro_auc"],
                "real_sample": v["real_sample"]["macro_auc"], "gap": v["gap"]}
            for m, v in u["models"].items()}


# ----- Adult ---------------------------------------------------------------------------------

def adult(sizes: Sizes, folder: Path, key: Path, trust: Path) -> dict[str, Any]:
    """Every (mode, epsilon) on Adult: release in a child, decode, both evaluators, TVD."""
    from audits.fidelity import run_fidelity
    from audits.utility import run_utility
    from release.private_data import read_private_rows
    from selpe_audit.schema import load_schema

    train_path, test_path, schema_path = split_paths(sizes.quick_split)
    schema = load_schema(schema_path)
    real_train = read_private_rows(train_path, schema).priv_rows
    real_test = read_private_rows(test_path, schema).priv_rows
    runs = []
    for mode in sizes.modes:
        for eps in sizes.slow_modes_epsilons if mode in SLOW_MODES else sizes.epsilons:
            row: dict[str, Any] = {"mode": mode, "epsilon": label(eps)}
            used = ZCDP_INF if eps == INF and mode != "marginals" else eps
            try:
                settings = release_settings(train_path, schema_path, used, folder, key, mode)
                if mode == "aim" and sizes.aim_rounds is not None:
                    settings["aim_rounds"] = sizes.aim_rounds
                rel = release_child(settings)
                row["decoder"] = decoder_for(mode)
                out = folder / f"syn-{mode}-{eps}.parquet"
                row["decode_s"] = round(decode(settings["out"], trust, out, len(real_train),
                                               row["decoder"]), 2)
                table = read_private_rows(out, schema)
                row["models"] = _auc(run_utility(schema, table.priv_rows, real_train,
                                                 real_test, None, seed=0))
                fid = run_fidelity(schema, table, real_train)["overall"]
                row |= {"tvd_1way": fid["mean_1way"], "tvd_2way": fid["mean_2way"],
                        "tvd_per_field": fid["tvd_1way"], "release": rel}
            except Exception as e:  # one failing mode must not hide the others
                row["error"] = f"{type(e).__name__}: {e}"
            print(adult_line(row), flush=True)
            runs.append(row)
    cost = {r["mode"]: {"release_s": r["release"]["seconds"],
                        "peak_rss_mib": r["release"]["peak_rss_mib"],
                        "decode_s": r["decode_s"]}
            for r in runs if r["epsilon"] == label(COST_EPSILON) and "release" in r}
    return {"train_rows": len(real_train), "test_rows": len(real_test),
            "epsilons": [label(e) for e in sizes.epsilons], "modes": list(sizes.modes),
            "aim_rounds": sizes.aim_rounds, "runs": runs,
            "floor": structure_floor(schema, real_train, real_test),
            "cost_at_epsilon": COST_EPSILON, "cost": cost, "cpus": os.cpu_count()}


FLOOR = {"independent": "fields independent within the class, exact values",
         "independent_binned": "the same, numbers uniform in their schema bin"}


def structure_floor(schema: Any, real_train: list[dict[str, Any]],
                    real_test: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """TSTR of the training rows with each field redrawn independently within its class (the
    class-star model with exact counts), exact and with numbers binned: no noise, no fit."""
    import numpy as np

    from audits.utility import run_utility
    from selpe_audit.bins import sample_in_bin

    rng = np.random.default_rng(seed)
    by_class: dict[Any, list[dict[str, Any]]] = {}
    for r in real_train:
        by_class.setdefault(r[schema.label], []).append(r)
    exact = [{f.name: c if f.name == schema.label else rows[int(rng.integers(len(rows)))][f.name]
              for f in schema.record_fields} for c, rows in by_class.items() for _ in rows]
    numeric = [f for f in schema.record_fields if f.kind == "numeric" and f.name != schema.label]
    binned = [{**r, **{f.name: sample_in_bin(f, f.bin_index(r[f.name]), rng) for f in numeric}}
              for r in exact]
    return {name: {"what": FLOOR[name],
                   "models": _auc(run_utility(schema, rows, real_train, real_test, None,
                                              seed=seed))}
            for name, rows in (("independent", exact), ("independent_binned", binned))}


# ----- demo ----------------------------------------------------------------------------------

@dataclass
class DemoInputs:
    members: Path
    test: Path
    pool: Path


def _demo_inputs(folder: Path, members: int) -> DemoInputs:
    import polars as pl

    from selpe_audit.demo.command import DATA
    from selpe_audit.demo.generator import generate_rows, write_rows

    data = DATA
    if members < 400:
        data = folder / "members.csv"
        pl.read_csv(DATA, infer_schema=False).head(members).write_csv(data)
    test = write_rows(generate_rows(400, seed=1), folder / "demo_test.csv")
    return DemoInputs(Path(data), Path(test), public_pool(folder))


def public_pool(folder: Path) -> Path:
    """The public pool of 600 fictional rows (another seed) that topic anchors come from."""
    from selpe_audit.demo.generator import generate_rows

    pool = folder / "pool.jsonl"
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"})
                            + "\n" for r in generate_rows(600, seed=12345)))
    return pool


def demo_settings(data: Path, folder: Path, key: Path, mode: str, tag: str,
                  pool: Path | None, epsilon: float = 2.0) -> dict[str, Any]:
    """A counts-only release of demo rows (the demo's TOML: person unit, cohorts, rates)."""
    from selpe_audit.schema import demo_schema_path

    return {"data": data, "schema": demo_schema_path(), "dataset": f"demo-{tag}",
            "out": folder / f"rel-{tag}", "release_key": key, "epsilon": epsilon,
            "counts_share": 1.0, "selection_share": 0.0, "lifetime_epsilon": 2 * INF,
            "lifetime_ledger": folder / f"ledger-{tag}", "enclave_log": folder / f"{tag}.log",
            "counts_mode": mode, **({"candidates": pool} if pool is not None else {})}


def demo_config() -> Path:
    """The bundled demo release config (the other counts benchmarks release with it too)."""
    return ROOT / "selpe_audit" / "data" / "demo_release.toml"


def demo(sizes: Sizes, folder: Path, key: Path, trust: Path) -> dict[str, Any]:
    """Per mode, ``demo_releases`` releases at epsilon 2: TSTR of both LRs, dropped classes."""
    from audits.io import load_embedder, read_records
    from audits.utility import run_utility
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release
    from selpe_audit.schema import demo_schema_path, load_schema

    schema = load_schema(demo_schema_path())
    inputs = _demo_inputs(folder, sizes.demo_members)
    members = read_records(inputs.members, schema)  # records: the person id left out
    test = read_records(inputs.test, schema)
    embedder = load_embedder()
    out: dict[str, Any] = {}
    for mode in sizes.demo_modes:
        releases, dropped, errors = [], 0, []
        decoder = decoder_for(mode)
        for i in range(sizes.demo_releases):
            tag = f"{mode}-{i}"
            settings = demo_settings(inputs.members, folder, key, mode, tag, inputs.pool)
            if mode == "aim" and sizes.aim_rounds is not None:
                settings["aim_rounds"] = sizes.aim_rounds
            try:
                with _quiet():
                    run_release(load_config(demo_config(), settings),
                                installation=Installation.for_experiments("benchmark"))
                syn_path = folder / f"demo-{tag}.parquet"
                decode(settings["out"], trust, syn_path, len(members), decoder, seed=i)
                syn = read_records(syn_path, schema)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                continue
            per_class = {str(c): sum(r[schema.label] == c for r in syn) for c in schema.classes}
            missing = [c for c, k in per_class.items() if k == 0]
            dropped += bool(missing)
            u = _auc(run_utility(schema, syn, members, test, embedder, seed=0))
            releases.append({"rows_per_class": per_class, "classes_without_rows": missing,
                             "auc": u})
        out[mode] = {"decoder": decoder, "releases": len(releases),
                     "releases_with_a_dropped_class": dropped,
                     **_demo_means(releases), "runs": releases,
                     **({"errors": errors} if errors else {})}
        print(demo_line(mode, out[mode]), flush=True)
    return {"members": len(members), "test_rows": len(test), "epsilon": 2.0,
            "releases_per_mode": sizes.demo_releases, "modes": out}


def _demo_means(releases: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    if not releases:
        return {}
    out = {}
    for m in ("tfidf_logreg", "onehot_logreg"):
        syn = [r["auc"][m]["synthetic"] for r in releases if r["auc"][m]["synthetic"] is not None]
        real = releases[0]["auc"][m]["real_sample"]  # seeded: the same in every release
        out[m] = {"synthetic_mean": float(np.mean(syn)) if syn else None,
                  "synthetic_min": float(np.min(syn)) if syn else None,
                  "real_sample": real,
                  "gap_mean": None if not syn or real is None else real - float(np.mean(syn))}
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The release's console lines, one per release, would drown the benchmark's."""
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        yield


# ----- stages on many demo rows ------------------------------------------------------------

def demo_rows(n: int) -> Path:
    """``n`` fictional demo rows (seed 7) as CSV, cached (a million take ~6 minutes)."""
    from selpe_audit.demo.generator import generate_rows, write_rows

    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"demo-{n}.csv"
    if not path.exists():
        tmp = path.with_suffix(".tmp.csv")
        write_rows(generate_rows(n, seed=7), tmp)
        tmp.replace(path)
    return path


# ----- the run -------------------------------------------------------------------------------

#: the release stages' times, once a part here, are benchmarks.scale's (stage by stage, 10^4
#: to 10^6 rows, the default path's phrases and topic codes at 20,000): the last numbers of
#: the part stay in this benchmark's RESULTS.json entry
PARTS = ("adult", "demo")


def run(quick: bool = False, modes: str | Sequence[str] | None = None,
        epsilons: str | Sequence[float] | None = None,
        parts: str | Sequence[str] = PARTS) -> dict[str, Any]:
    """``modes``, ``epsilons`` and ``parts`` as sequences or comma-separated text (``--set
    epsilons=1,2,inf``)."""
    from selpe_audit.artifact.signing import generate_keypair

    if isinstance(epsilons, str):
        epsilons = parse_epsilons(epsilons)
    modes, parts = (v.split(",") if isinstance(v, str) else v for v in (modes, parts))
    sizes = QUICK if quick else FULL
    if modes:
        sizes = replace(sizes, modes=tuple(modes), demo_modes=tuple(modes))
    if epsilons:
        sizes = replace(sizes, epsilons=tuple(epsilons))
    t0 = time.perf_counter()
    result: dict[str, Any] = {"targets": TARGETS, "epsilon_inf_means": INF,
                              "epsilon_inf_means_zcdp_modes": ZCDP_INF,
                              "load_average_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        key, trust, _ = generate_keypair(folder / "release.pem")
        for part, fn in (("adult", adult), ("demo", demo)):
            if part not in parts:
                continue
            sub = folder / part
            sub.mkdir()
            t1 = time.perf_counter()
            try:
                result[part] = fn(sizes, sub, key, trust)
            except Exception as e:  # keep the other parts
                result[part] = {"error": f"{type(e).__name__}: {e}"}
            result[part]["seconds"] = round(time.perf_counter() - t1, 1)
            print(f"  {part} done in {result[part]['seconds']:.0f} s", flush=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["load_average_at_end"] = os.getloadavg()[0]
    result["table"] = table(result)
    result["summary"] = summary(result)
    print(result["table"])
    print(result["summary"])
    return result


# the table is rendered anew from the result (the stage timings moved to scale)
BENCHMARK = Benchmark("counts_modes", run, table=table, plots=plots)


if __name__ == "__main__":  # the child `release_child` starts: one release, measured alone
    enable_opendp()  # OpenDP's contrib features, once, at the process's entry
    print(json.dumps(_child(json.loads(sys.argv[2]))), flush=True)
