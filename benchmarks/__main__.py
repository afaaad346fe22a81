"""Run every benchmark and write benchmarks/RESULTS.md (regenerated, never edited by hand).

    python -m benchmarks [--quick] [--only counts,selection,...] [--out benchmarks/RESULTS.md]
    python -m benchmarks --only scale --huge   # the scale benchmark with 10^7 rows
    python -m benchmarks --only scale --set sizes=10000,100000   # a study's own option
    python -m benchmarks --render      # the page and its plots from RESULTS.json, no run

Each benchmark measures its comparisons side by side in one run and reports ratios and
medians; ``--quick`` runs the reduced size of every one (the CI smoke run). Every number goes
to RESULTS.json; RESULTS.md is a short page (`benchmarks.report`) with a summary line, one
table per benchmark and SVG plots in benchmarks/plots/.
"""

from __future__ import annotations

import argparse
import ast
import inspect
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
           options: dict[str, Any]) -> dict[str, Any]:
    return {"command": benchmark(name).command + (" --quick" if quick else "")
            + "".join(f" --set {k}={v!r}" for k, v in options.items()),
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
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="an option of the one study --only names: a keyword of its run "
                         "(a Python literal, else text), e.g. --set sizes=10000,100000")
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
    options = parse_options(args.set) | ({"huge": True} if args.huge else {})
    if options:
        check_options(names, args.quick, options)
    failed = run_benchmarks(names, args.quick, out, options)
    print(f"wrote {out}")
    if failed:
        raise SystemExit(1)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``--set NAME=VALUE`` pairs as keyword arguments: a value is a Python literal where it
    reads as one (``10000,100000`` is a tuple), else its text."""
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.isidentifier():
            raise SystemExit(f"--set {pair}: write NAME=VALUE, NAME a keyword of the study's run")
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[name] = text
    return out


def check_options(names: list[str], quick: bool, options: dict[str, Any]) -> None:
    """Options go to one study, and only those its run takes (refused before anything runs,
    naming the ones it does take)."""
    if len(names) != 1:
        raise SystemExit("--set and --huge apply to one study: name it alone in --only")
    signature = inspect.signature(benchmark(names[0]).run)
    try:
        signature.bind(quick, **options)
    except TypeError:
        takes = [p for p in signature.parameters if p != "quick"]
        wrong = [k for k in options if k not in takes] or list(options)
        raise SystemExit(f"{names[0]} takes {', '.join(takes) or 'no options'}; "
                         f"not {', '.join(wrong)}") from None


def run_benchmarks(names: list[str], quick: bool, out: Path,
                   options: dict[str, Any] | None = None) -> list[str]:
    """Run ``names`` in order in this process (sharing its models), writing RESULTS.json and
    the page at ``out`` after each; the names of those that raised (their entry says why).
    ``options``: keyword arguments of the one study named (``--set``)."""
    options = options or {}
    failed = []
    for name in names:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            result = benchmark(name).run(quick, **options)
        except Exception as e:  # one failing benchmark must not hide the others
            result = {"error": f"{type(e).__name__}: {e}"}
            failed.append(name)
        # Re-read before each write: another run (--only) may have finished a section since.
        sidecar = out.with_suffix(".json")
        entries = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        entries[name] = _kept(entries.get(name), _entry(
            name, result, quick, time.perf_counter() - t0, options))
        write_results(out, entries)  # after each: a crash keeps what was measured
    return failed


if __name__ == "__main__":
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    main()
