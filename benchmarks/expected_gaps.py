"""``selpe_audit/data/expected_gaps.json`` from benchmarks/RESULTS.json: the demo's measured
TSTR gaps by table size (ours and smartnoise's AIM, text blanked) that ``selpe-audit demo``
quotes next to its own numbers. The product reads this small file, never a benchmark run:
`make expected-gaps` writes it after a full small_tables run.

    python -m benchmarks.expected_gaps [--results benchmarks/RESULTS.json] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.json"
EXPECTED = ROOT / "selpe_audit" / "data" / "expected_gaps.json"


def expected_gaps(entry: dict[str, Any]) -> dict[str, Any]:
    """The file's content from RESULTS.json's small_tables entry (a full run's)."""
    if entry["command"].endswith("--quick"):
        raise ValueError("RESULTS.json holds a --quick small_tables run: run it in full first")
    result, sizes = entry["result"], {}
    for r in result["results"]:
        if r["dataset"] != "demo" or r["synthesizer"] not in ("ours", "smartnoise aim"):
            continue
        who = "ours" if r["synthesizer"] == "ours" else "aim"
        sizes.setdefault(str(r["n"]), {})[who] = {k: r["gaps"][k]["mean"] for k in ("lr", "gb")}
    return {"source": "python -m benchmarks.small_tables (benchmarks/RESULTS.md, small_tables)",
            "epsilon": result["epsilon"], "measured": entry["date"].split()[0], "gaps": sizes}


def text(entry: dict[str, Any]) -> str:
    """The file's bytes, as `write` leaves them."""
    return json.dumps(expected_gaps(entry), indent=1, sort_keys=True) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=EXPECTED)
    args = ap.parse_args()
    entry = json.loads(args.results.read_text(encoding="utf-8"))["small_tables"]
    args.out.write_text(text(entry), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
