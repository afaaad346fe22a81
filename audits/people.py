"""How well synthetic people resemble the real ones (a schema with person structure,
`selpe_audit.person_schema`): what the report and the persons benchmark measure.

- **visits per person**: TVD of the share of people with 1, 2, ..., cap-or-more visits;
- **transitions**: over consecutive visits (a person's first ``cap``, in order), the TVD of
  each transition field at a visit x the next visit's label, and of the gap's public bin;
  their mean;
- **return-visit TSTR**: train on synthetic people, from their first visit's fields,
  whether they come back; test on real people (AUC); next to the same model trained on a
  same-size sample of real people;
- **C2ST on people**: a classifier told real people from synthetic ones by per-person
  aggregates (visits, the first two visits' categories, the first gap); its cross-validated
  AUC (0.5: indistinguishable).

Rows are polars frames with the person id (the schema's ``x-id``): the decoded people carry
fresh ids, the real ones theirs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import polars as pl
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import cross_val_predict
from threadpoolctl import threadpool_limits

from audits import fidelity
from selpe_audit.person_schema import person_structure
from selpe_audit.schema import Schema

_SLOT, _COUNT = "__slot", "__n"


def histories(df: pl.DataFrame, schema: Schema, cap: int) -> pl.DataFrame:
    """Each person's first ``cap`` visits in order, with their slot (0-based) and the
    person's number of visits (capped)."""
    s, pid = person_structure(schema), schema.id_field or ""
    return (df.sort([pid, s.order])
            .with_columns(pl.int_range(pl.len()).over(pid).alias(_SLOT),
                          pl.len().over(pid).clip(upper_bound=cap).alias(_COUNT))
            .filter(pl.col(_SLOT) < cap))


def visits_shares(df: pl.DataFrame, schema: Schema, cap: int) -> np.ndarray:
    """The share of people with 1..cap (cap: or more) visits."""
    n = histories(df, schema, cap).filter(pl.col(_SLOT) == 0)[_COUNT].to_numpy()
    counts = np.bincount(n, minlength=cap + 1)[1:].astype(float)
    return counts / max(1.0, counts.sum())


def steps(df: pl.DataFrame, schema: Schema, cap: int) -> pl.DataFrame:
    """Consecutive visit pairs: each transition field at a visit, the next visit's label
    (``next``) and the gap's public bin (``gap``)."""
    s, pid = person_structure(schema), schema.id_field or ""
    h = histories(df, schema, cap)
    gap = pl.col(s.order).shift(-1).over(pid) - pl.col(s.order)
    return (h.with_columns(pl.col(schema.label).shift(-1).over(pid).alias("next"),
                           s.gap_code(gap).alias("gap"))
            .filter(pl.col("gap").is_not_null())
            .select([*s.transitions, "next", "gap"]))


def tvd(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> float:
    """`audits.fidelity.tvd`, with an empty side read as nothing alike (1; 0 if both are
    empty): people without a second visit have no transitions to match."""
    value = fidelity.tvd(a, b)
    if value is None:
        return 0.0 if not a and not b else 1.0
    return value


def transitions(syn: pl.DataFrame, real: pl.DataFrame, schema: Schema,
                cap: int) -> dict[str, float]:
    """TVD per transition field (at a visit x the next label), of the gap bins, and their
    mean."""
    s = person_structure(schema)
    a, b = steps(syn, schema, cap), steps(real, schema, cap)
    out = {f"{f} -> next {schema.label}": tvd(list(a.select(f, "next").iter_rows()),
                                              list(b.select(f, "next").iter_rows()))
           for f in s.transitions}
    out["gap"] = tvd(list(a.select("gap").iter_rows()), list(b.select("gap").iter_rows()))
    out["mean"] = float(np.mean(list(out.values())))
    return out


def first_visits(df: pl.DataFrame, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """(features of each person's first visit, whether they came back)."""
    h = histories(df, schema, 2)
    returns = h.group_by(schema.id_field).agg(pl.len().alias("__visits"))
    first = h.filter(pl.col(_SLOT) == 0).join(returns, on=schema.id_field)
    return _features(schema, first), (first["__visits"] > 1).to_numpy().astype(int)


def return_auc(train: pl.DataFrame, test: pl.DataFrame, schema: Schema, seed: int) -> float:
    """AUC on ``test``'s people of a model trained on ``train``'s: from the first visit,
    whether the person comes back (0.5 when the training people never, or always, do)."""
    x_tr, y_tr = first_visits(train, schema)
    x_te, y_te = first_visits(test, schema)
    if len(set(y_tr)) < 2 or len(set(y_te)) < 2:
        return 0.5
    model = HistGradientBoostingClassifier(random_state=seed, max_iter=100)
    with threadpool_limits(limits=1, user_api="openmp"):
        model.fit(x_tr, y_tr)
        return float(roc_auc_score(y_te, model.predict_proba(x_te)[:, 1]))


def person_aggregates(df: pl.DataFrame, schema: Schema, cap: int) -> np.ndarray:
    """Per person: visits (capped), the person fields, the first two visits' transition
    fields (or none), the non-decreasing fields at the first visit, the first gap."""
    s, pid = person_structure(schema), schema.id_field or ""
    h = histories(df, schema, cap)
    cols = [pl.col(_COUNT).first().alias("visits")]
    cols += [pl.col(f).first().alias(f) for f in (*s.person_fields, *s.nondecreasing)]
    for f in s.transitions:
        cols += [pl.col(f).first().alias(f"{f}_1"),
                 pl.col(f).slice(1, 1).first().alias(f"{f}_2")]
    cols.append((pl.col(s.order).slice(1, 1).first() - pl.col(s.order).first())
                .alias("gap_1"))
    people = h.group_by(pid, maintain_order=True).agg(cols)
    blocks = [people["visits"].to_numpy()[:, None].astype(float)]
    for f in s.nondecreasing:
        blocks.append(people[f].to_numpy()[:, None].astype(float))
    blocks.append(people["gap_1"].fill_null(-1).to_numpy()[:, None].astype(float))
    for name in [*s.person_fields, *(f"{f}_{k}" for f in s.transitions for k in (1, 2))]:
        values = list(schema.field(name.rsplit("_", 1)[0] if name not in s.person_fields
                                   else name).enum)
        column = people[name].to_list()
        onehot = np.zeros((len(column), len(values) + 1))
        for i, v in enumerate(column):
            onehot[i, values.index(v) if v in values else len(values)] = 1.0
        blocks.append(onehot)
    return np.hstack(blocks)


def c2st_people(syn: pl.DataFrame, real: pl.DataFrame, schema: Schema, cap: int,
                seed: int) -> float:
    """Cross-validated AUC of a classifier telling real people from synthetic ones (equal
    numbers of each, the larger side sampled down)."""
    rng = np.random.default_rng(seed)
    a, b = person_aggregates(syn, schema, cap), person_aggregates(real, schema, cap)
    n = min(len(a), len(b))
    a, b = a[rng.permutation(len(a))[:n]], b[rng.permutation(len(b))[:n]]
    x, y = np.vstack([a, b]), np.r_[np.zeros(n), np.ones(n)]
    model = HistGradientBoostingClassifier(random_state=seed, max_iter=100)
    with threadpool_limits(limits=1, user_api="openmp"):
        p = cross_val_predict(model, x, y, cv=5, method="predict_proba")[:, 1]
    return float(roc_auc_score(y, p))


def _features(schema: Schema, rows: pl.DataFrame) -> np.ndarray:
    """Numeric fields as they are, categorical fields one-hot (free text and the id out)."""
    blocks = []
    for f in schema.record_fields:
        if f.kind == "numeric":
            blocks.append(rows[f.name].to_numpy()[:, None].astype(float))
        elif f.kind == "categorical":
            values = rows[f.name].to_list()
            onehot = np.zeros((len(values), len(f.enum)))
            index = {v: i for i, v in enumerate(f.enum)}
            for i, v in enumerate(values):
                if v in index:
                    onehot[i, index[v]] = 1.0
            blocks.append(onehot)
    return np.hstack(blocks)


def person_mia(syn: pl.DataFrame, members: pl.DataFrame, non_members: pl.DataFrame,
               schema: Schema, cap: int) -> dict[str, float]:
    """Membership inference at the person level: a person's score is minus the distance of
    their aggregates (`person_aggregates`, standardised on the synthetic people) to the
    nearest synthetic person; AUC and the largest TPR - FPR of members (the people the
    release read) against non-members (0.5 and 0: no signal)."""
    from sklearn.neighbors import NearestNeighbors

    from audits.stats import auc, max_advantage

    s = person_aggregates(syn, schema, cap)
    mean, std = s.mean(axis=0), s.std(axis=0) + 1e-9
    nn = NearestNeighbors(n_neighbors=1).fit((s - mean) / std)

    def scores(df: pl.DataFrame) -> np.ndarray:
        d, _ = nn.kneighbors((person_aggregates(df, schema, cap) - mean) / std)
        return -d[:, 0]

    pos, neg = scores(members), scores(non_members)
    return {"auc": auc(pos, neg), "advantage": max_advantage(pos, neg),
            "members": len(pos), "non_members": len(neg)}


def people_report(syn: pl.DataFrame, train: pl.DataFrame, test: pl.DataFrame, schema: Schema,
                  cap: int, seed: int) -> dict[str, Any]:
    """What the audit report shows of people: the visits per person and the gap bins side by
    side, each transition field's step table (the next label's share given the field's
    value) for real and synthetic people with their TVDs, the return-visit TSTR next to a
    same-size real sample, the C2ST on people and the person-level MIA."""
    s = person_structure(schema)
    real_steps, syn_steps = steps(train, schema, cap), steps(syn, schema, cap)
    labels = [str(c) for c in schema.classes]
    tables = {}
    for f in s.transitions:
        rows = [str(v) for v in schema.field(f).enum]
        tables[f] = {"rows": rows, "columns": labels,
                     "real": _conditional(real_steps, f, rows, labels),
                     "synthetic": _conditional(syn_steps, f, rows, labels)}
    gaps = s.gap_labels()
    sample = train.filter(pl.col(schema.id_field).is_in(
        train[schema.id_field].unique().sample(
            min(train[schema.id_field].n_unique(), syn[schema.id_field].n_unique()),
            seed=seed)))
    return {
        "cap": cap,
        "visits": {"labels": [f"{k}" if k < cap else f"{k}+" for k in range(1, cap + 1)],
                   "real": visits_shares(train, schema, cap).tolist(),
                   "synthetic": visits_shares(syn, schema, cap).tolist()},
        "gaps": {"labels": gaps, "real": _shares(real_steps["gap"], len(gaps)),
                 "synthetic": _shares(syn_steps["gap"], len(gaps))},
        "steps": tables,
        "tvd": transitions(syn, train, schema, cap),
        "visits_tvd": 0.5 * float(abs(visits_shares(syn, schema, cap)
                                      - visits_shares(train, schema, cap)).sum()),
        "return_tstr": {"synthetic": return_auc(syn, test, schema, seed),
                        "real_sample": return_auc(sample, test, schema, seed)},
        "c2st_auc": c2st_people(syn, train, schema, cap, seed),
        "mia": person_mia(syn, train, test, schema, cap),
    }


def _conditional(df: pl.DataFrame, field: str, rows: list[str],
                 columns: list[str]) -> list[list[float | None]]:
    """The next label's share per value of ``field`` (None: no step from that value)."""
    counts = Counter((str(a), str(b)) for a, b in df.select(field, "next").iter_rows())
    out: list[list[float | None]] = []
    for r in rows:
        total = sum(counts[(r, c)] for c in columns)
        out.append([counts[(r, c)] / total if total else None for c in columns])
    return out


def _shares(codes: pl.Series, n: int) -> list[float]:
    counts = np.bincount(codes.to_numpy().astype(int), minlength=n)[:n].astype(float)
    return (counts / max(1.0, counts.sum())).tolist()
