"""smartnoise-synth's AIM and MST as a tabular-only peer, in a venv of its own.

smartnoise-synth 1.0 pins an older OpenDP (through smartnoise-sql) and opacus, so it cannot
share the project's environment. `make peers` builds its venv once (``python -m
benchmarks.smartnoise_peer --build``: torch from the CPU build first, so opacus does not pull
a CUDA one) under the user's cache, keyed by its requirements, so a fresh clone of the
project reuses it; `SELPE_PEER_VENV` names another place. Nothing builds it during a run: a
benchmark or a test that finds it missing gets `PeerFailed` saying to run `make peers`. This
file runs in that venv as a script:

    VENV/bin/python benchmarks/smartnoise_peer.py IN.csv OUT.csv SYNTH EPS N

``IN.csv`` holds public codes only (`encode`: a category's index in the schema's enum, a
number's bin index in the schema's bins; free text dropped), so the peer sees the same
public bins as our release. Its own preprocessing reads each column's set of codes from the
data (not DP; a peer's detail, said in RESULTS). `decode_rows` turns codes back into
records (a number uniform in its bin's grid points, `selpe_audit.bins.sample_in_bin`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REQUIREMENTS = ["torch==2.13.0", "smartnoise-synth==1.0.8"]
#: how much of a failed peer's stderr its error keeps (the last lines say what broke)
ERROR_TAIL = 400


class PeerFailed(RuntimeError):
    """A peer run that did not produce records: the cell's error in a benchmark's table."""


def venv_path(name: str = "smartnoise", requirements: list[str] = REQUIREMENTS) -> Path:
    """Where a peer's venv lives: `SELPE_PEER_VENV` (smartnoise's), or the cache, keyed by
    its requirements."""
    if name == "smartnoise" and os.environ.get("SELPE_PEER_VENV"):
        return Path(os.environ["SELPE_PEER_VENV"])
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "selpe-audit" / f"venv-{name}-{key}"


def peer_python(name: str = "smartnoise", requirements: list[str] = REQUIREMENTS,
                make: str = "make peers") -> Path:
    """A peer venv's python; `PeerFailed` when ``make`` has not built it."""
    venv = venv_path(name, requirements)
    if not (venv / ".built").exists():
        raise PeerFailed(f"the {name} venv is not built ({venv}): run `{make}`")
    return venv / "bin" / "python"


def build_env(name: str = "smartnoise", requirements: list[str] = REQUIREMENTS,
              check: str = "import snsynth", drop: tuple[str, ...] = ()) -> Path:
    """Build a peer's venv (a no-op when it is there): each requirement in turn (torch
    first: the CPU build from local disk), then ``drop`` uninstalled, then ``check`` run;
    the marker file is written last, so a build cut short is built again."""
    venv = venv_path(name, requirements)
    if (venv / ".built").exists():
        return venv
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    for req in requirements:
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", req], check=True)
    if drop:
        subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", *drop], check=True)
    subprocess.run([str(python), "-c", check], check=True)
    (venv / ".built").write_text("\n".join(requirements) + "\n")
    return venv


def encode(schema: Any, rows: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Public codes of each categorical and numeric field (the label included)."""
    out = []
    for r in rows:
        rec = {}
        for f in schema.record_fields:
            if f.kind == "categorical":
                rec[f.name] = list(f.enum).index(r[f.name])
            elif f.kind == "numeric":
                rec[f.name] = f.bin_index(float(r[f.name]))
        out.append(rec)
    return out


def decode_rows(schema: Any, coded: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Records from the peer's codes; free text blank."""
    import numpy as np

    from selpe_audit.bins import sample_in_bin

    rng = np.random.default_rng(seed)
    out = []
    for c in coded:
        rec: dict[str, Any] = {}
        for f in schema.record_fields:
            if f.kind == "categorical":
                rec[f.name] = f.enum[int(c[f.name])]
            elif f.kind == "numeric":
                rec[f.name] = sample_in_bin(f, int(c[f.name]), rng)
            else:
                rec[f.name] = ""
        out.append(rec)
    return out


def run_peer(schema: Any, members: list[dict[str, Any]], synth: str, epsilon: float,
             n: int, folder: Path, seed: int) -> list[dict[str, Any]]:
    """``n`` records from smartnoise's ``synth`` fitted on ``members`` at ``epsilon``;
    `PeerFailed` with the reason (the end of the peer's stderr) when it produced none."""
    import polars as pl

    python = peer_python()
    src, dst = folder / f"peer-{synth}-in.csv", folder / f"peer-{synth}-out.csv"
    dst.unlink(missing_ok=True)
    pl.DataFrame(encode(schema, members)).write_csv(src)
    r = subprocess.run([str(python), __file__, str(src), str(dst), synth, str(epsilon), str(n)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not dst.exists():
        tail = " ".join(r.stderr.split())[-ERROR_TAIL:] or "no output"
        raise PeerFailed(f"smartnoise {synth} exited with status {r.returncode}: {tail}")
    return decode_rows(schema, pl.read_csv(dst).to_dicts(), seed)


def _main(src: str, dst: str, synth: str, epsilon: str, n: str) -> None:
    """Inside the peer venv: fit and sample (every column categorical)."""
    import pandas as pd
    from snsynth import Synthesizer

    df = pd.read_csv(src)
    model = Synthesizer.create(synth, epsilon=float(epsilon), verbose=False)
    model.fit(df, categorical_columns=list(df.columns), preprocessor_eps=0.0)
    model.sample(int(n)).to_csv(dst, index=False)


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:  # `make peers`
        print(f"smartnoise-synth venv: {build_env()}")
    else:
        _main(*sys.argv[1:6])
