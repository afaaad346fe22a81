"""Run every benchmark and write benchmarks/RESULTS.md (regenerated, never edited by hand).

    python -m benchmarks [--quick] [--only counts,selection,...] [--out benchmarks/RESULTS.md]
    python -m benchmarks --only scale --huge   # the scale benchmark with 10^7 rows
    python -m benchmarks --render      # the page and its plots from RESULTS.json, no run

Each benchmark measures its comparisons side by side in one run and reports ratios and
medians; ``--quick`` runs the reduced size of every one (the CI smoke run). Every number goes
to RESULTS.json; RESULTS.md is a short page (`benchmarks.report`) with a summary line, one
table per benchmark and SVG plots in benchmarks/plots/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = Path(__file__).parent


def _counts(quick: bool) -> dict[str, Any]:
    from benchmarks import counts
    return counts.run(20_000, 1) if quick else counts.run(1_000_000, 7)


def _generation(quick: bool) -> dict[str, Any]:
    from benchmarks import generation
    return generation.run(records=300, quick=quick)


def _selection(quick: bool) -> dict[str, Any]:
    from benchmarks import selection
    return selection.run(10, 500 if quick else 10_000, quick)


def _decode(quick: bool) -> dict[str, Any]:
    from benchmarks import decode
    return decode.run(n=200, quick=quick)  # LLM too: 400 candidates (4 with --quick)


def _shards(quick: bool) -> dict[str, Any]:
    from benchmarks import shards
    return shards.run(quick)


def _triage(quick: bool) -> dict[str, Any]:
    from benchmarks import triage
    return triage.run(quick)


def _audits(quick: bool) -> dict[str, Any]:
    from benchmarks import audits
    return audits.run(quick)


def _database(quick: bool) -> dict[str, Any]:
    from benchmarks import database
    return database.run(quick=quick)


def _selection_modes(quick: bool) -> dict[str, Any]:
    from benchmarks import selection_modes
    return selection_modes.run(quick)


def _images(quick: bool) -> dict[str, Any]:
    from benchmarks import images
    return images.run(quick)


def _scale(quick: bool, huge: bool = False) -> dict[str, Any]:
    from benchmarks import scale
    return scale.run(quick, huge=huge)


def _artifact_read(quick: bool) -> dict[str, Any]:
    from benchmarks import artifact_read
    return artifact_read.run(quick=quick)


def _api(quick: bool) -> dict[str, Any]:
    from benchmarks import api
    return api.run(quick=quick)


def _counts_modes(quick: bool) -> dict[str, Any]:
    from benchmarks import counts_modes
    return counts_modes.run(quick)


def _release_time(quick: bool) -> dict[str, Any]:
    from benchmarks import release_time
    return release_time.run(quick)


def _person_ledger(quick: bool) -> dict[str, Any]:
    from benchmarks import person_ledger
    return person_ledger.run(quick)


def _small_tables(quick: bool) -> dict[str, Any]:
    from benchmarks import small_tables
    from benchmarks.common import RunCache
    return small_tables.run(quick, runs=RunCache.from_env("small_tables", small_tables.KEYS))


BENCHMARKS: dict[str, tuple[str, Callable[[bool], dict[str, Any]]]] = {
    "small_tables": ("python -m benchmarks.small_tables", _small_tables),
    "release_time": ("python -m benchmarks.release_time", _release_time),
    "person_ledger": ("python -m benchmarks.person_ledger", _person_ledger),
    "counts": ("python -m benchmarks.counts", _counts),
    "selection": ("python -m benchmarks.selection", _selection),
    "selection_modes": ("python -m benchmarks.selection_modes", _selection_modes),
    "counts_modes": ("python -m benchmarks.counts_modes", _counts_modes),
    "triage": ("python -m benchmarks.triage", _triage),
    "decode": ("python -m benchmarks.decode", _decode),
    "shards": ("python -m benchmarks.shards", _shards),
    "scale": ("python -m benchmarks.scale", _scale),  # 10^7 rows too: --huge
    "generation": ("python -m benchmarks.generation", _generation),
    "database": ("python -m benchmarks.database", _database),
    "audits": ("python -m benchmarks.audits", _audits),
    "images": ("python -m benchmarks.images", _images),
    "artifact_read": ("python -m benchmarks.artifact_read", _artifact_read),
    "api": ("python -m benchmarks.api", _api),
}


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    return (f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
            f"commit {commit or 'unknown'}")


def _entry(name: str, result: dict[str, Any], quick: bool, seconds: float,
           huge: bool = False) -> dict[str, Any]:
    return {"command": BENCHMARKS[name][0] + (" --quick" if quick else "")
            + (" --huge" if huge else ""),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": _machine(), "seconds": round(seconds, 1), "result": result}


def _kept(before: dict[str, Any] | None, entry: dict[str, Any]) -> dict[str, Any]:
    """The new entry; or, when this run failed and the one before had numbers, those numbers
    with the failure beside them (a failed rerun must not lose the last measurement)."""
    if "error" not in entry["result"] or before is None or "error" in before["result"]:
        return entry
    failure = {k: entry[k] for k in ("command", "date")} | {"error": entry["result"]["error"]}
    return before | {"last_failure": failure}


def write_results(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """RESULTS.json beside ``path`` with every benchmark's latest entry (so a run of a subset
    with ``--only`` keeps the others), then the page at ``path`` rendered from it."""
    from benchmarks.report import write_results as write

    write(path, entries, list(BENCHMARKS))


def render(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """The short page and its plots (`benchmarks.report`), sections in BENCHMARKS order."""
    from benchmarks.report import write_page

    write_page(path, entries, list(BENCHMARKS))


def main() -> None:
    ap = argparse.ArgumentParser(description="run every benchmark, write RESULTS.md")
    ap.add_argument("--quick", action="store_true", help="reduced sizes (CI smoke)")
    ap.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset")
    ap.add_argument("--out", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--huge", action="store_true",
                    help="scale also releases 10^7 rows (about 3 minutes and 7 GB more)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the page and its plots from RESULTS.json (no run)")
    args = ap.parse_args()
    out = Path(args.out)
    sidecar = out.with_suffix(".json")
    if args.render:
        if not sidecar.exists():
            raise SystemExit(f"{sidecar}: no results to render")
        render(out, json.loads(sidecar.read_text()))
        print(f"wrote {out}")
        return
    names = args.only.split(",")
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(BENCHMARKS)}")
    failed = run_benchmarks(names, args.quick, out, args.huge)
    print(f"wrote {out}")
    if failed:
        raise SystemExit(1)


def run_benchmarks(names: list[str], quick: bool, out: Path, huge: bool = False) -> list[str]:
    """Run ``names`` in order in this process (sharing its models), writing RESULTS.json and
    the page at ``out`` after each; the names of those that raised (their entry says why).
    ``huge``: the scale benchmark's 10^7 rows too."""
    failed = []
    for name in names:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            result = (_scale(quick, huge=True) if huge and name == "scale"
                      else BENCHMARKS[name][1](quick))
        except Exception as e:  # one failing benchmark must not hide the others
            result = {"error": f"{type(e).__name__}: {e}"}
            failed.append(name)
        # Re-read before each write: another run (--only) may have finished a section since.
        sidecar = out.with_suffix(".json")
        entries = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        entries[name] = _kept(entries.get(name), _entry(
            name, result, quick, time.perf_counter() - t0, huge and name == "scale"))
        write_results(out, entries)  # after each: a crash keeps what was measured
    return failed

if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    main()
