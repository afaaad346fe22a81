"""smartnoise-synth's AIM and MST as a tabular-only peer, in a venv of its own.

smartnoise-synth 1.0 pins an older OpenDP (through smartnoise-sql) and opacus, so it cannot
share the project's environment; `ensure_env` builds ``.venv-smartnoise`` next to the
project (torch from the CPU build first, so opacus does not pull a CUDA one) and this file
runs there as a script:

    .venv-smartnoise/bin/python benchmarks/smartnoise_peer.py IN.csv OUT.csv SYNTH EPS N

``IN.csv`` holds public codes only (`encode`: a category's index in the schema's enum, a
number's bin index in the schema's bins; free text dropped), so the peer sees the same
public bins as our release. Its own preprocessing reads each column's set of codes from the
data (not DP; a peer's detail, said in RESULTS). `decode_rows` turns codes back into
records (a number uniform in its bin's grid points, `selpe_audit.bins.sample_in_bin`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-smartnoise"
REQUIREMENTS = ["torch==2.13.0", "smartnoise-synth==1.0.8"]


def ensure_env() -> Path | None:
    """The peer's python, building its venv on first use; None when it cannot be built."""
    python = VENV / "bin" / "python"
    if python.exists():
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        for req in REQUIREMENTS:  # torch alone first: the CPU build from local disk
            subprocess.run([str(python), "-m", "pip", "install", "-q", req], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"smartnoise peer: cannot build {VENV} ({e})", flush=True)
        return None
    return python


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
             n: int, folder: Path, seed: int) -> list[dict[str, Any]] | None:
    """``n`` records from smartnoise's ``synth`` fitted on ``members`` at ``epsilon``."""
    import polars as pl

    python = ensure_env()
    if python is None:
        return None
    src, dst = folder / f"peer-{synth}-in.csv", folder / f"peer-{synth}-out.csv"
    pl.DataFrame(encode(schema, members)).write_csv(src)
    subprocess.run([str(python), __file__, str(src), str(dst), synth, str(epsilon), str(n)],
                   check=True)
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
    _main(*sys.argv[1:6])
