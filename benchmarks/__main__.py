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
from pathlib import Path
from typing import Any

from benchmarks.report import write_page, write_results
from benchmarks.suite import STUDIES, benchmark
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = Path(__file__).parent


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
    return {"command": benchmark(name).command + (" --quick" if quick else "")
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


def main() -> None:
    ap = argparse.ArgumentParser(description="run every benchmark, write RESULTS.md")
    ap.add_argument("--quick", action="store_true", help="reduced sizes (CI smoke)")
    ap.add_argument("--only", default=",".join(STUDIES), help="comma-separated subset")
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
        write_page(out, json.loads(sidecar.read_text()))
        print(f"wrote {out}")
        return
    names = args.only.split(",")
    unknown = [n for n in names if n not in STUDIES]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(STUDIES)}")
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
            bench = benchmark(name)
            result = (bench.run(quick, huge=True) if huge and name == "scale"
                      else bench.run(quick))
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
