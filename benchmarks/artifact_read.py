"""Reading a release.json: the schema check's fast path next to jsonschema, and the whole read.

    python -m benchmarks.artifact_read [--repeats 200] [--quick]

The artifact is a real counts-only release of the bundled demo sample (default counts mode,
OpenDP). Its JSON Schema is generated from the typed records (`selpe_audit.artifact.records`);
`check_release_document` validates with fastjsonschema's compiled code and asks jsonschema
only for the message when a document fails. Side by side, interleaved, medians: jsonschema's
validation alone, the fast path, and the whole read a decode or review does (verify the
signature, check the schema, read every part as its record, check it against the embedded
dataset schema).
"""

from __future__ import annotations

import io
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks import command
from benchmarks.suite import Benchmark
from release.config_file import load_config
from release.pipeline import run_release
from selpe_audit.artifact.document import (
    RELEASE_FILE,
    check_release_document,
    read_release,
    schema_validators,
)
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.schema import demo_schema_path

SAMPLE = Path(__file__).resolve().parents[1] / "selpe_audit" / "data" / "ed_triage_sample.csv"


def _release(tmp: Path) -> tuple[Path, Path]:
    priv, pub, _ = generate_keypair(tmp / "release.pem")
    cfg = load_config(None, {"data": SAMPLE, "schema": demo_schema_path(), "release_key": priv,
                             "out": tmp / "art", "lifetime_ledger": tmp / "ledger",
                             "enclave_log": tmp / "log", "epsilon": 2.0, "counts_share": 1.0,
                             "selection_share": 0.0})
    run_release(cfg, Console(file=io.StringIO()))
    return tmp / "art", pub


def run(repeats: int = 200, quick: bool = False) -> dict[str, Any]:
    if quick:
        repeats = 10
    with tempfile.TemporaryDirectory() as tmp:
        art, pub = _release(Path(tmp))
        doc = json.loads((art / RELEASE_FILE).read_text(encoding="utf-8"))
        precise = schema_validators().precise
        ways = {"jsonschema validation": lambda: precise.validate(doc),
                "fast path (check_release_document)": lambda: check_release_document(doc),
                "whole read (verify, check, records, view)":
                    lambda: read_release(art, [pub]).view}
        times: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(repeats):
            for name, way in ways.items():
                t0 = time.perf_counter()
                way()
                times[name].append(time.perf_counter() - t0)
        size = (art / RELEASE_FILE).stat().st_size
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    base = med["jsonschema validation"]
    table = ("| step | median (ms) | ratio to jsonschema |\n|---|---|---|\n"
             + "\n".join(f"| {k} | {v:.2f} | {v / base:.3f} |" for k, v in med.items()))
    summary = (f"A {size / 1024:.0f} KiB release.json: the schema check's fast path takes "
               f"{med['fast path (check_release_document)'] / base:.3f}x jsonschema's "
               f"validation; the whole read {med['whole read (verify, check, records, view)']:.1f}"
               " ms.")
    return {"repeats": repeats, "bytes": size, "ms": med, "table": table, "summary": summary}


BENCHMARK = Benchmark("artifact_read", lambda quick: run(quick=quick))


def main() -> None:
    p = command.parser(__doc__)
    p.add_argument("--repeats", type=int, default=200)
    a = p.parse_args()
    command.finish(run(a.repeats, a.quick), a.json)


if __name__ == "__main__":
    from release.dp import enable

    enable()
    main()
