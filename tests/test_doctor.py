"""The install's llama.cpp smoke check and `selpe-audit doctor` catch a build that crashes.

A stub `llama_cpp` package that kills its own process with SIGILL on import stands in for a
llama.cpp compiled for another CPU (the AMX trap seen on a Xeon VM): it fails exactly the way
that build failed, in the child process the checks start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from selpe_audit.llm import backend_check

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install-llama.sh"


@pytest.fixture
def crashing_llama(tmp_path: Path) -> dict[str, str]:
    """An environment whose `import llama_cpp` dies with SIGILL."""
    pkg = tmp_path / "stub" / "llama_cpp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    return dict(os.environ, PYTHONPATH=str(pkg.parent), HF_HUB_OFFLINE="1")


def test_backend_check_reports_the_signal_in_one_line(crashing_llama, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    res = backend_check.check_backend(model, env=crashing_llama, timeout=120)
    assert not res.ok and res.signal == "SIGILL"
    assert "\n" not in res.line and "SIGILL" in res.line and "CPU flags" in res.line


def test_build_features_read_from_system_info():
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 0 | LLAMAFILE = 1 |"
    assert backend_check.build_features(info) == "SSE3 AVX AVX2 LLAMAFILE"


def _install_llama(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    venv = Path(sys.executable).parents[1]
    env = dict(env, VENV=str(venv), LLAMA_DRY_RUN="1", LLAMA_STAMP=str(tmp_path / "stamp"),
               LLAMA_WHEEL_CACHE=str(tmp_path / "wheels"))
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_install_rebuilds_portable_when_the_build_crashes(crashing_llama, tmp_path):
    # A native wheel from the cache that crashes here: it must be deleted, not reused.
    cached = tmp_path / "wheels" / "native-0123456789abcdef"
    cached.mkdir(parents=True)
    (cached / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    (tmp_path / "stamp").write_text(f"native\n{cached}/llama_cpp_python-0.3.36.whl\n")
    r = _install_llama(crashing_llama, tmp_path, "verify")
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert any("crashed here" in line and "SIGILL" in line and "portable" in line
               for line in err), r.stderr
    assert any("would build CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF'" in line
               for line in err), r.stderr
    assert not cached.exists(), "a crashing cached wheel was kept"
    # The stub crashes the portable build too: one line naming the CPU flags and the build.
    assert err[-1].startswith("error: llama.cpp does not run on this machine")
    assert "CPU flags" in err[-1] and "-DGGML_NATIVE=OFF" in err[-1]


def test_install_keys_native_wheels_by_build_and_cpu(tmp_path):
    r = _install_llama(dict(os.environ), tmp_path, "install")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("dry run"))
    assert "-DGGML_NATIVE=ON" in line and "-mno-amx-tile" in line
    assert (tmp_path / "stamp").read_text().startswith("native\n")


@pytest.mark.model
def test_doctor_fails_in_one_line_on_a_crashing_build(crashing_llama):
    r = subprocess.run([str(Path(sys.executable).with_name("selpe-audit")), "doctor"],
                       env=crashing_llama, capture_output=True, text=True, timeout=900)
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "SIGILL" in err[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr


@pytest.mark.model
def test_doctor_passes_on_this_install_and_shows_tokens_per_second():
    r = subprocess.run([str(Path(sys.executable).with_name("selpe-audit")), "doctor"],
                       env=dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200"),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tokens/s" in r.stdout and "FAIL" not in r.stdout
