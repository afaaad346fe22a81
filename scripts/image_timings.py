"""The images, built and used here: build times, sizes, decode speed inside (issue 36).

    sudo .venv/bin/python scripts/image_timings.py [--quick] [--json FILE] [--results]

A script, not one of the benchmarks (`python -m benchmarks`): it needs root, podman and the
network-free builds of `make image`. ``--results`` writes its numbers to the ``images``
section of benchmarks/RESULTS.json and redraws the page.

Needs root, podman and debootstrap (Debian's packages); without them the result says it was
skipped. Timed, in this order:

- the base (`scripts/base-image.sh`: Debian bookworm from Debian's packages, imported);
- the wheelhouse (`scripts/wheelhouse.sh`, portable llama.cpp; a rerun builds nothing new);
- the release image and the CPU decode image, every layer rebuilt (`scripts/image.sh` with
  ``NO_CACHE=1``), with no network in the build;
- the release image's test (`scripts/image-test.sh`: doctor, the demo, a canary release,
  the ledger refusal, signatures checked with OpenSSL, layers searched for keys and canaries);
- inside the CPU decode image, with no network, decodes of one counts-only demo artifact by
  the model decoder and the hybrid LLM decoder (the bundled 270M model), records/s, next to
  the same decodes in this checkout's venv (the ratio shows what the image costs).

``--quick``: builds from the layer cache, 2,000 model records and 4 LLM records (the default:
20,000 and 16).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.json"
DECODE_IMAGE = "localhost/selpe-audit:decode-cpu"
#: run inside the decode image: each decode of the artifact timed, one JSON line each
_TIMED_DECODES = """
import json, subprocess, sys, time
for decoder, n in json.loads(sys.argv[1]):
    t = time.perf_counter()
    subprocess.run(["selpe-audit", "decode", "/bench/artifact", "--release-key",
                    "/bench/release.pub.pem", "--decoder", decoder, "--n", str(n),
                    "--out", f"/tmp/bench/{decoder}.parquet"], check=True,
                   stdout=subprocess.DEVNULL)
    print(json.dumps({"decoder": decoder, "n": n, "seconds": time.perf_counter() - t}))
"""


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    if r.returncode != 0:
        tail = " / ".join(line for line in (r.stdout + r.stderr).splitlines()[-4:])
        raise RuntimeError(f"{' '.join(cmd)} failed: {tail}")
    return round(time.perf_counter() - t0, 1)


def _size(image: str) -> int:
    return int(subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", image],
                              capture_output=True, text=True, check=True).stdout)


def _artifact(folder: Path) -> tuple[Path, Path]:
    """A counts-only release of the demo sample with the demo's config, mode fixed."""
    from release.config_file import load_config
    from release.installation import Installation
    from release.pipeline import run_release
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.demo.command import DATA
    from selpe_audit.schema import demo_schema_path

    key, pub, _ = generate_keypair(folder / "release.pem")
    cfg = load_config(ROOT / "selpe_audit" / "data" / "demo_release.toml", {
        "data": DATA, "schema": demo_schema_path(), "dataset": "demo-images",
        "out": folder / "artifact", "release_key": key, "epsilon": 2.0, "counts_share": 1.0,
        "selection_share": 0.0, "lifetime_ledger": folder / "ledger",
        "enclave_log": folder / "enclave.log", "counts_mode": "fixed", "topics": 0})
    run_release(cfg, installation=Installation.for_experiments("image timings"))
    return cfg.out, pub


def _decodes_in_image(artifact: Path, pub: Path, plan: list[tuple[str, int]],
                      folder: Path) -> list[dict[str, Any]]:
    ctx = folder / "decode-context"
    shutil.copytree(artifact, ctx / "artifact")
    shutil.copy(pub, ctx / "release.pub.pem")
    (ctx / "timed.py").write_text(_TIMED_DECODES)
    (ctx / "Containerfile").write_text(
        f"FROM {DECODE_IMAGE}\nCOPY . /bench/\nRUN mkdir -p /tmp/bench && "
        f"python /bench/timed.py '{json.dumps(plan)}' > /tmp/bench/timings.jsonl\n")
    tag = "localhost/selpe-audit:bench-decode"
    try:
        _timed(["unshare", "--net", "podman", "build", "--isolation=chroot", "--no-cache",
                "--tag", tag, str(ctx)])
        subprocess.run(["podman", "create", "--name", "selpe-audit-bench", tag], check=True,
                       capture_output=True)
        subprocess.run(["podman", "cp", "selpe-audit-bench:/tmp/bench/timings.jsonl",
                        str(folder / "timings.jsonl")], check=True, capture_output=True)
    finally:
        subprocess.run(["podman", "rm", "-f", "selpe-audit-bench"], capture_output=True)
        subprocess.run(["podman", "rmi", "-f", tag], capture_output=True)
    return [json.loads(line) for line in (folder / "timings.jsonl").read_text().splitlines()]


def _decodes_here(artifact: Path, pub: Path, plan: list[tuple[str, int]],
                  folder: Path) -> list[dict[str, Any]]:
    out = []
    for decoder, n in plan:
        seconds = _timed([str(Path(sys.executable).with_name("selpe-audit")), "decode",
                          str(artifact), "--release-key", str(pub), "--decoder", decoder,
                          "--n", str(n), "--out", str(folder / f"here-{decoder}.parquet")])
        out.append({"decoder": decoder, "n": n, "seconds": seconds})
    return out


def run(quick: bool = False) -> dict[str, Any]:
    missing = [t for t in ("podman", "debootstrap", "unshare") if shutil.which(t) is None]
    if missing or os.geteuid() != 0:
        why = f"needs root and {', '.join(missing)}" if missing else "needs root"
        return {"skipped": why + " (apt-get install podman debootstrap)"}
    cache = {} if quick else {"NO_CACHE": "1"}
    out: dict[str, Any] = {"quick": quick, "steps": {}}
    steps = out["steps"]
    if not quick:
        steps["base image"] = _timed(["scripts/base-image.sh"])
    steps["wheelhouse"] = _timed(["scripts/wheelhouse.sh", "wheelhouse"],
                                 {"LLAMA_BUILD": "portable"})
    steps["release image"] = _timed(["scripts/image.sh", "release"], cache)
    steps["image test"] = _timed(["scripts/image-test.sh"])
    steps["decode image (CPU)"] = _timed(["scripts/image.sh", "decode-cpu"], cache)
    out["bytes"] = {"base image": _size("localhost/selpe-audit-base:bookworm"),
                    "release image": _size("localhost/selpe-audit:release"),
                    "decode image (CPU)": _size(DECODE_IMAGE),
                    "wheelhouse": sum(f.stat().st_size for f in (ROOT / "wheelhouse").iterdir()
                                      if f.is_file())}
    plan = [("model", 2_000 if quick else 20_000), ("llm", 4 if quick else 16)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        artifact, pub = _artifact(folder)
        out["decode"] = {"image": _decodes_in_image(artifact, pub, plan, folder),
                         "venv": _decodes_here(artifact, pub, plan, folder)}
    out["table"] = table(out)
    out["summary"] = summary(out)
    return out


def _rates(r: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {where: {d["decoder"]: d["n"] / d["seconds"] for d in runs}
            for where, runs in r["decode"].items()}


def table(r: dict[str, Any]) -> str:
    """What was built: seconds and size (the test and the decodes are in the summary)."""
    lines = ["| built | seconds | size |", "|---|---|---|"]
    for step, seconds in r["steps"].items():
        if step in r["bytes"]:
            lines.append(f"| {step} | {seconds:.0f} | {r['bytes'][step] / 2**30:.2f} GiB |")
    return "\n".join(lines)


def summary(r: dict[str, Any]) -> str:
    rates, b, s = _rates(r), r["bytes"], r["steps"]
    here, inside = rates["venv"], rates["image"]
    return (f"Release image {b['release image'] / 2**30:.2f} GiB built in "
            f"{s['release image']:.0f} s with no network and tested in {s['image test']:.0f} s "
            f"(no key or canary in its layers); CPU decode image "
            f"{b['decode image (CPU)'] / 2**30:.2f} GiB: model decoder "
            f"{inside['model']:,.0f} records/s, LLM {inside['llm']:.2f} records/s inside "
            f"({inside['model'] / here['model']:.2f}x and {inside['llm'] / here['llm']:.2f}x "
            "the venv's).")


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripts/image_timings.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="cached builds, fewer records")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--results", action="store_true",
                    help="write them to benchmarks/RESULTS.json's images section too")
    args = ap.parse_args()
    t0 = time.perf_counter()
    result = run(args.quick)
    print(result.get("table") or result)
    print(result.get("summary", ""))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    if args.results and "skipped" not in result:
        _record(result, args.quick, time.perf_counter() - t0)
    return 0


def _record(result: dict[str, Any], quick: bool, seconds: float) -> None:
    """The ``images`` entry of RESULTS.json, then the page redrawn (`python -m benchmarks
    --render`)."""
    import platform

    entries = json.loads(RESULTS.read_text())
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    entries["images"] = {
        "command": ".venv/bin/python scripts/image_timings.py" + (" --quick" if quick else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
                   f"commit {commit}", "seconds": round(seconds, 1), "result": result}
    RESULTS.write_text(json.dumps(entries, indent=2, default=str) + "\n")
    subprocess.run([sys.executable, "-m", "benchmarks", "--render"], cwd=ROOT, check=True)


if __name__ == "__main__":
    raise SystemExit(main())
