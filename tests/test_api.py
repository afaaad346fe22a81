"""The Python API (issue 68): one code path with the commands (the same document, the same
rows, the same one-line messages), DataFrames in, the air gap kept."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from conftest import DEMO_SAMPLE, ROOT, good_row
from test_golden_artifact import (  # noqa: F401 - planned_rows: the golden test's fixture
    ALWAYS_MASKED,
    DEMO_CONFIG,
    GOLDEN,
    LAST_DECIMAL,
    anchor_vectors,
    canonical,
    masked_doc,
    planned_rows,
)

import selpe_audit
from selpe_audit.cli.main import main
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path


def test_the_api_names_are_public_and_typed():
    assert set(selpe_audit.__all__) >= {"release", "open_artifact", "audit_report",
                                        "audit_mechanism", "Release", "Artifact", "Report"}
    for name in selpe_audit.__all__:
        assert getattr(selpe_audit, name) is not None, name
    for package in ("selpe_audit", "release", "decode", "audits"):
        assert (ROOT / package / "py.typed").is_file(), package
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = selpe_audit.nope


def test_opening_an_artifact_never_loads_the_release_stage():
    """The air gap in a notebook: the off-site names import decode, never release."""
    code = ("import sys, selpe_audit; selpe_audit.open_artifact; selpe_audit.Artifact; "
            "print(sorted(m for m in sys.modules if m == 'release' or m.startswith('release.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


@pytest.mark.model  # the topic codebooks embed the pool's texts (the real embedder)
def test_a_dataframe_release_is_the_golden_document(tmp_path, keys, models,
                                                     planned_rows):  # noqa: F811
    """The demo's default release through `selpe_audit.release` with the sample as a polars
    DataFrame (typed columns, not the file's strings) writes the command's golden document
    (the golden test's masking of unseeded noise; its source says "dataframe")."""
    from selpe_audit.demo.generator import generate_rows

    pool = tmp_path / "candidate_pool.jsonl"
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"})
                            + "\n" for r in generate_rows(300, seed=2)))
    rel = selpe_audit.release(pl.read_csv(DEMO_SAMPLE), demo_schema_path(), epsilon=2.0,
                              key=keys[0][0], out=tmp_path / "out", config=DEMO_CONFIG,
                              lifetime_ledger=tmp_path / "ledger",
                              candidates=pool, progress=False)
    assert rel.path == tmp_path / "out" and (rel.path / "release.json").is_file()
    assert rel.document.doc["source"] == {"kind": "dataframe"}
    assert rel.ledger and rel.guarantee.protects
    assert "<html" in rel.review_html() and "epsilon spent" in rel._repr_html_()
    want = json.loads((GOLDEN / "demo_default.json").read_text(encoding="utf-8"))
    masked = set(want["masked"]) | set(ALWAYS_MASKED)
    got, want_doc = masked_doc(dict(rel.document.doc), masked), masked_doc(want["document"], masked)
    got_vectors, want_vectors = anchor_vectors(got), anchor_vectors(want_doc)
    for name, vectors in want_vectors.items():  # the embedder's floats: to their last decimal
        diff = np.abs(np.asarray(got_vectors[name]) - np.asarray(vectors))
        assert diff.max(initial=0.0) <= LAST_DECIMAL * 1.01, name
    assert canonical(got) == canonical(want_doc)


def test_sample_gives_the_commands_rows(counts_artifact, keys, tmp_path, capsys):
    """The same seed, the same rows as ``selpe-audit decode``; a second sample reuses the
    refit model; pandas gets the same table."""
    (_, pub, _), _ = keys
    out = tmp_path / "cli.parquet"
    assert main(["decode", str(counts_artifact), "--trust", str(pub), "--n", "300",
                 "--decoder", "model", "--seed", "5", "--out", str(out)]) == 0
    art = selpe_audit.open_artifact(counts_artifact, trust=[pub])
    got = art.sample(300, decoder="model", seed=5, progress=False)
    assert got.equals(pl.read_parquet(out))
    assert art.epsilon == pytest.approx(art.document.ledger.total_epsilon)
    assert art.guarantee.statements and "epsilon spent" in art._repr_html_()
    assert got.to_pandas().shape == (300, len(art.document.schema.record_fields))
    result = art.sample_to(tmp_path / "big.jsonl", 500, decoder="marginals", chunk_rows=200,
                           progress=False)
    assert result.rows == 500 and result.provenance.is_file()


def _cli_message(capsys, argv: list[str]) -> str:
    """The command's error line (its progress lines come before it)."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 2 and "error: " in last and "Traceback" not in err, err
    return " ".join(last.split())


def _api_message(call) -> str:
    with pytest.raises(UserError) as e:
        call()
    assert "\n" not in str(e.value)
    return " ".join(str(e.value).split())


def test_bad_input_through_the_api_is_the_commands_one_line(counts_artifact, keys, tmp_path,
                                                            capsys, monkeypatch):
    """Every case both ways: the API raises UserError with the message the command prints
    (nothing else: no other exception)."""
    monkeypatch.setenv("COLUMNS", "400")
    (priv, pub, _), (_, other, _) = keys
    schema = demo_schema_path()
    bad_csv = tmp_path / "bad.csv"
    pl.DataFrame([good_row(1), {**good_row(2), "heart_rate": 999}]).write_csv(bad_csv)
    common = {"key": priv, "out": tmp_path / "o", "lifetime_ledger": tmp_path / "l"}
    flags = ["--key", str(priv), "--out", str(tmp_path / "o"), "--lifetime-ledger",
             str(tmp_path / "l")]
    cases = [
        (lambda: selpe_audit.release(tmp_path / "nope.csv", schema, epsilon=1.0, **common),
         ["release", "--data", str(tmp_path / "nope.csv"), "--schema", str(schema),
          "--epsilon", "1", *flags]),
        (lambda: selpe_audit.release(bad_csv, schema, epsilon=1.0, **common),
         ["release", "--data", str(bad_csv), "--schema", str(schema), "--epsilon", "1",
          *flags]),
        (lambda: selpe_audit.release(bad_csv, schema, epsilon=-1.0, **common),
         ["release", "--data", str(bad_csv), "--schema", str(schema), "--epsilon", "-1",
          *flags]),
        (lambda: selpe_audit.release(DEMO_SAMPLE, schema, epsilon=1.0, counts_share=1.5,
                                     **common),
         ["release", "--data", str(DEMO_SAMPLE), "--schema", str(schema), "--epsilon", "1",
          "--counts-share", "1.5", *flags]),
        (lambda: selpe_audit.release(DEMO_SAMPLE, schema, epsilon=1.0, unit="person",
                                     max_contributions=0, **common),
         ["release", "--data", str(DEMO_SAMPLE), "--schema", str(schema), "--epsilon", "1",
          "--unit", "person", "--max-contributions", "0", *flags]),
        (lambda: selpe_audit.open_artifact(tmp_path / "none", trust=[pub]),
         ["decode", str(tmp_path / "none"), "--trust", str(pub), "--n", "5", "--out",
          str(tmp_path / "x.parquet")]),
        (lambda: selpe_audit.open_artifact(counts_artifact, trust=[other]),
         ["decode", str(counts_artifact), "--trust", str(other), "--n", "5", "--out",
          str(tmp_path / "x.parquet")]),
        (lambda: selpe_audit.open_artifact(counts_artifact, trust=[pub]).sample(0),
         ["decode", str(counts_artifact), "--trust", str(pub), "--n", "0", "--out",
          str(tmp_path / "x.parquet")]),
        (lambda: selpe_audit.open_artifact(counts_artifact, trust=[pub]).sample(
            5, decoder="model", overgenerate=0.5),
         ["decode", str(counts_artifact), "--trust", str(pub), "--n", "5", "--decoder", "model",
          "--overgenerate", "0.5", "--out", str(tmp_path / "x.parquet")]),
        (lambda: selpe_audit.open_artifact(counts_artifact, trust=[pub]).sample_to(
            tmp_path / "x.xlsx", 5),
         ["decode", str(counts_artifact), "--trust", str(pub), "--n", "5", "--out",
          str(tmp_path / "x.xlsx")]),
        (lambda: selpe_audit.audit_report(tmp_path / "nope.csv", DEMO_SAMPLE, DEMO_SAMPLE,
                                          schema),
         ["audit", "report", "--synthetic", str(tmp_path / "nope.csv"), "--real-train",
          str(DEMO_SAMPLE), "--real-test", str(DEMO_SAMPLE), "--schema", str(schema), "--out",
          str(tmp_path / "r.html")]),
        (lambda: selpe_audit.audit_mechanism("selection", epsilon=0),
         ["audit", "mechanism", "--kind", "selection", "--epsilon", "0"]),
    ]
    for call, argv in cases:
        api, cli = _api_message(call), _cli_message(capsys, argv)
        assert api in cli, (api, cli)
    assert not (tmp_path / "o").exists()


@pytest.mark.model  # the model-file cases try to load the LLM (and fail, as they must)
def test_the_decode_corpus_through_the_api(counts_artifact, keys, tmp_path, capsys,
                                           monkeypatch):
    """tests/test_decode.py's bad-input corpus, each case both ways: the API raises the
    command's one line (a tampered or future artifact, the three model-file cases)."""
    from test_decode import bad_decode_inputs

    monkeypatch.setenv("COLUMNS", "400")
    (priv, pub, _), _ = keys
    tampered, future, not_gguf, corrupt = bad_decode_inputs(counts_artifact, priv, tmp_path)
    out = str(tmp_path / "o.parquet")
    cases = [(lambda art=art: selpe_audit.open_artifact(art, trust=[pub]),
              ["decode", str(art), "--trust", str(pub), "--n", "5", "--out", out])
             for art in (tampered, future)]
    cases += [(lambda m=m: selpe_audit.open_artifact(counts_artifact, trust=[pub]).sample(
                   5, model=str(m)),
               ["decode", str(counts_artifact), "--trust", str(pub), "--n", "5", "--model",
                str(m), "--out", out])
              for m in (tmp_path / "missing.gguf", not_gguf, corrupt)]
    for call, argv in cases:
        api, cli = _api_message(call), _cli_message(capsys, argv)
        assert api in cli, (api, cli)
    assert not Path(out).exists()


def test_in_memory_tables_and_their_errors(tmp_path, keys, demo_schema):
    """polars, pandas and pyarrow tables read as the file would be; a bad one is one line
    naming the table and the row, never the value; anything else is refused."""
    from release.frame_source import FrameSource
    from release.private_data import read_private_rows

    rows = [good_row(i) for i in range(4)]
    want = read_private_rows(FrameSource.of(pl.DataFrame(rows)), demo_schema).priv_rows
    assert want == rows
    for table in (pd.DataFrame(rows), pa.Table.from_pylist(rows)):
        assert read_private_rows(FrameSource.of(table), demo_schema).priv_rows == rows
    canary = "CANARY-frame-7731"
    bad = pl.DataFrame([*rows, {**good_row(9), "sex": canary}])
    with pytest.raises(UserError) as e:
        read_private_rows(FrameSource.of(bad), demo_schema)
    assert "the polars DataFrame: 1 invalid row(s); first: row 5, field 'sex'" in str(e.value)
    assert canary not in str(e.value)
    typed = pl.DataFrame(rows).with_columns(pl.lit([1, 2]).alias("chief_complaint"))
    with pytest.raises(UserError, match=r"column 'chief_complaint' has type .* cast the column"):
        read_private_rows(FrameSource.of(typed), demo_schema)
    with pytest.raises(UserError, match="no rows"):
        read_private_rows(FrameSource.of(pl.DataFrame(rows).clear()), demo_schema)
    with pytest.raises(UserError, match="a list is not a source of rows"):
        selpe_audit.release(rows, demo_schema_path(), epsilon=1.0, key=keys[0][0],
                            out=tmp_path / "o", dataset="d")
    with pytest.raises(UserError, match="name the dataset"):
        selpe_audit.release(pl.DataFrame(rows), demo_schema_path(), epsilon=1.0,
                            key=keys[0][0], out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.model  # the report embeds the free text
def test_example_notebook_runs(tmp_path, monkeypatch, capsys, models):
    """examples/notebook.py, the README's Python walk-through, end to end on the demo data
    (release, approve, open with the trusted keys, sample into pandas, a TSTR)."""
    import runpy

    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(ROOT / "examples" / "notebook.py"), run_name="__main__")
    out = capsys.readouterr().out
    synthetic, real = (float(x) for x in re.findall(r"(?:synthetic|real) (0\.\d+)", out))
    assert 0.6 < real <= 1 and 0.5 < synthetic <= 1, out
    assert (tmp_path / "out" / "report.html").is_file()
    assert len(list((tmp_path / "out" / "release" / "signatures").glob("*.sig"))) == 2


@pytest.mark.model  # the report embeds the free text
def test_the_readme_python_example_runs(tmp_path, monkeypatch, capsys, models):
    """The README's Python walk-through (at most 20 lines), as printed there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    synthetic, real = (float(x) for x in re.findall(r"(?:TSTR|real) (0\.\d+)",
                                                      capsys.readouterr().out))
    assert 0.6 < real <= 1 and 0.5 < synthetic <= 1
