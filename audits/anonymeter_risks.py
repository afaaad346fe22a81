"""Singling-out, linkability and attribute-inference risks with anonymeter (optional).

anonymeter 1.1 pins ``numpy<1.27`` and ``pyarrow<22``; the project's environment has numpy
2.x (torch, opendp, sentence-transformers), so anonymeter is not a dependency. `audit mia`
runs these attacks when anonymeter is importable and reports "not installed" otherwise.
In a separate environment (see `SEPARATE_ENV`) this module runs on its own::

    python -m audits.anonymeter_risks --synthetic S --members M --non-members H \\
        --schema X --report R.json

It needs only anonymeter, jsonschema and polars next to this source tree (data files are
still read through ``release.private_data``). Free-text fields are left out: anonymeter's
mixed-type distances treat a text as one category, so every complaint would be unique and
"single out" trivially; the DCR attacks of `audits.mia` cover text.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from audits.io import REPORT_NOTE, file_info, load_record_schema, read_records, write_report
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema

SEPARATE_ENV = ("python3.11 -m venv .venv-anonymeter && .venv-anonymeter/bin/pip install "
                "anonymeter jsonschema polars==1.36.1 && PYTHONPATH=. .venv-anonymeter/bin/python "
                "-m audits.anonymeter_risks --synthetic S --members M --non-members H --schema X")

Row = dict[str, Any]


def available() -> bool:
    return importlib.util.find_spec("anonymeter") is not None


def not_installed() -> dict[str, Any]:
    return {"status": "not installed",
            "detail": "anonymeter pins numpy<1.27, which conflicts with this environment; "
                      f"run it from a separate environment: {SEPARATE_ENV}"}


def _frame(schema: Schema, rows: Sequence[Row]) -> Any:
    import pandas as pd

    cols = [f for f in schema.record_fields if f.kind != "text"]
    data = {f.name: [r[f.name] if f.kind == "numeric" else str(r[f.name]) for r in rows]
            for f in cols}
    return pd.DataFrame(data)


def run_anonymeter(schema: Schema, syn: Sequence[Row], members: Sequence[Row],
                   non_members: Sequence[Row], n_attacks: int = 500,
                   seed: int = 0) -> dict[str, Any]:
    """Every anonymeter attack, members as 'ori' and non-members as 'control' (so risks are
    residual: what the synthetic data reveal about members beyond the population)."""
    if not available():
        return not_installed()
    from anonymeter.evaluators import (
        InferenceEvaluator,
        LinkabilityEvaluator,
        SinglingOutEvaluator,
    )

    ori, syn_f, control = _frame(schema, members), _frame(schema, syn), _frame(schema, non_members)
    n = min(n_attacks, len(ori), len(control))
    aux = [c for c in ori.columns if c != schema.label]
    half = len(aux) // 2
    evaluators: dict[str, Any] = {
        "singling_out_univariate": lambda: SinglingOutEvaluator(
            ori, syn_f, n_attacks=n, control=control, seed=seed).evaluate(mode="univariate"),
        "singling_out_multivariate": lambda: SinglingOutEvaluator(
            ori, syn_f, n_attacks=n, n_cols=3, control=control, seed=seed
        ).evaluate(mode="multivariate"),
        "linkability": lambda: LinkabilityEvaluator(
            ori, syn_f, aux_cols=(aux[:half], aux[half:]), n_attacks=n, n_neighbors=1,
            control=control).evaluate(n_jobs=1),
    }
    for f in schema.record_fields:
        if f.kind == "categorical":
            others = [c for c in ori.columns if c != f.name]
            evaluators[f"inference:{f.name}"] = (
                lambda f=f, others=others: InferenceEvaluator(
                    ori, syn_f, aux_cols=others, secret=f.name, n_attacks=n,
                    control=control).evaluate(n_jobs=1))
    risks: dict[str, Any] = {}
    failed: dict[str, str] = {}
    notes: list[str] = []
    for name, make in evaluators.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ev = make()
                res, risk = ev.results(), ev.risk()
            except Exception as e:  # report the kind only: messages may quote data
                failed[name] = type(e).__name__
                continue
        notes += [f"{name}: {w.message}" for w in caught if issubclass(w.category, UserWarning)]
        risks[name] = {
            "risk": float(risk.value), "ci": [float(risk.ci[0]), float(risk.ci[1])],
            "attack_rate": float(res.attack_rate.value),
            "baseline_rate": float(res.baseline_rate.value),
            "control_rate": None if res.control_rate is None else float(res.control_rate.value),
        }
    import anonymeter

    return {"status": "ok", "version": getattr(anonymeter, "__version__", "unknown"),
            "n_attacks": n, "fields": list(ori.columns),
            "text_fields": "left out (each text would be its own category)",
            "risks": risks, "failed": failed, "warnings": notes}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m audits.anonymeter_risks",
                                description="anonymeter risks of synthetic records")
    for flag in ("--synthetic", "--members", "--non-members", "--schema"):
        p.add_argument(flag, required=True)
    p.add_argument("--report", help="JSON report (default: next to the synthetic file)")
    p.add_argument("--attacks", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        if not available():
            raise UserError("anonymeter is not installed in this environment")
        schema = load_record_schema(args.schema)
        syn = read_records(args.synthetic, schema)
        mem, non = read_records(args.members, schema), read_records(args.non_members, schema)
        result = run_anonymeter(schema, syn, mem, non, args.attacks, args.seed)
        syn_path = Path(args.synthetic)
        out = Path(args.report) if args.report else syn_path.with_name(
            f"{syn_path.stem}.audit-anonymeter.json")
        write_report(out, {"kind": "anonymeter", "privacy": REPORT_NOTE,
                           "inputs": {k: file_info(getattr(args, k)) for k in
                                      ("synthetic", "members", "non_members", "schema")},
                           "result": result})
    except UserError as e:
        print(f"anonymeter audit: error: {e}", file=sys.stderr)
        return e.exit_code
    for name, v in result["risks"].items():
        print(f"{name:32s} risk {v['risk']:.3f}  CI [{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]")
    for name, kind in result["failed"].items():
        print(f"{name:32s} failed ({kind})")
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
