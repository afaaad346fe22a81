"""The released counts model, refit off-site, and exact sampling from it given the class.

`rebuild_model` refits the Private-PGM model from ``counts.model`` alone, as the release did
(same domain, same noisy marginals, OpenDP's ``dp.mbi.mirror_descent``): post-processing of
DP outputs, and deterministic, so every decode of one artifact uses the same model.

`Chain` turns the model into exact conditional sampling. The cells a record may hold
(``allowed``: never OpenDP's null cell, never a numeric bin without a grid point) are kept
and the potentials restricted to them, so the chain samples P(columns | allowed cells), the
model conditioned on holding a real value, and not a renormalisation after the fact. A
junction tree whose elimination order ends with the class column gives the sampling order
(the reverse: class first); each later column is drawn from its conditional given its
already drawn neighbours in the triangulated graph, which separate it from every other drawn
column, so the product of the conditionals is the model's joint, and fixing the class first
gives P(fields, topics | class) exactly. `ClassChain` precomputes those conditionals for one
class as cumulative tables, so a record costs one uniform and one bisection per column, done
for a block of records at once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selpe_audit.artifact.model_block import CountsModel


@functools.lru_cache(maxsize=4)
def rebuild_model(block: CountsModel) -> Any:
    """The release's fitted model (a ``mbi.MarkovRandomField``) from the released marginals.

    Kept for the process's next decoders of the same artifact (a notebook sampling twice,
    shards, the benchmarks): the fit is deterministic and takes seconds, the block is frozen
    and hashable, and no caller changes the model it gets."""
    from decode.decoders import pgm  # jax and mbi load only when a model is refitted

    domain = pgm.Domain([c.name for c in block.columns], [c.cells for c in block.columns])
    measurements = [pgm.LinearMeasurement(np.asarray(m.values, dtype=np.float64),
                                          tuple(m.clique), stddev=float(m.stddev))
                    for m in block.marginals]
    return pgm.fit(domain, measurements)


@dataclass(frozen=True)
class Step:
    """Draw ``column`` from P(column | parents): ``table`` has one axis per parent (in
    ``parents`` order) and a last axis over the column's allowed cells."""

    column: str
    parents: tuple[str, ...]
    table: np.ndarray


@dataclass(frozen=True)
class Chain:
    """The restricted model as a product of conditionals, ``first`` drawn first."""

    first: str
    first_marginal: np.ndarray             # P(first) over its allowed cells
    steps: tuple[Step, ...]
    allowed: Mapping[str, np.ndarray]      # per column: the model cells kept, in order

    @classmethod
    def fit(cls, model: Any, allowed: Mapping[str, Sequence[int]], first: str) -> Chain:
        """Conditionals of ``model`` restricted to ``allowed`` cells, ``first`` drawn first."""
        from decode.decoders import pgm

        junction_tree, marginal_oracles = pgm.junction_tree, pgm.marginal_oracles
        keep = {a: np.asarray(allowed[a], dtype=np.int64) for a in model.domain.attrs}
        if any(len(v) == 0 for v in keep.values()):
            raise ValueError("every model column needs an allowed cell")
        potentials = _restricted(model.potentials, keep)
        domain = potentials.domain
        others = [a for a in domain.attrs if a != first]
        order = junction_tree.greedy_order(domain, potentials.cliques, elim=others)[0]
        jtree, _ = junction_tree.make_junction_tree(domain, potentials.cliques,
                                                    elimination_order=[*order, first])
        cliques = junction_tree.maximal_cliques(jtree)
        marginals = marginal_oracles.message_passing_stable(potentials.expand(cliques), 1.0,
                                                            None, jtree)
        drawn = [first]
        steps = []
        for col in reversed(order):
            near = {a for cl in cliques if col in cl for a in cl}
            parents = tuple(a for a in drawn if a in near)
            joint = np.asarray(marginals.project((*parents, col)).datavector(flatten=False),
                               dtype=np.float64)
            steps.append(Step(col, parents, _conditional(joint)))
            drawn.append(col)
        p_first = np.asarray(marginals.project((first,)).datavector(flatten=False), np.float64)
        return cls(first, _conditional(p_first), tuple(steps), keep)

    def given(self, first_cell: int) -> ClassChain:
        """The chain with ``first`` fixed to model cell ``first_cell`` (an allowed one)."""
        at = int(np.flatnonzero(self.allowed[self.first] == first_cell)[0])
        names = [s.column for s in self.steps]
        pos = {c: i for i, c in enumerate(names)}
        plans = []
        for s in self.steps:
            table, parents = s.table, s.parents
            if self.first in parents:
                table = np.take(table, at, axis=parents.index(self.first))
                parents = tuple(p for p in parents if p != self.first)
            sizes = [len(self.allowed[p]) for p in parents]
            strides = [math.prod(sizes[j + 1:]) for j in range(len(sizes))]
            cdf = np.cumsum(table.reshape(-1, table.shape[-1]), axis=1)
            plans.append((tuple(pos[p] for p in parents), tuple(strides), cdf))
        cells = [np.asarray(self.allowed[c], dtype=np.intp) for c in names]
        return ClassChain(tuple(names), tuple(plans), tuple(cells))


@dataclass(frozen=True)
class ClassChain:
    """One class's conditionals as cumulative tables over flattened parent cells."""

    columns: tuple[str, ...]
    plans: tuple[tuple[tuple[int, ...], tuple[int, ...], np.ndarray], ...]
    cells: tuple[np.ndarray, ...]  # per column: allowed index -> model cell

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Model cells of ``size`` records, shape (size, columns): one uniform per record
        and column from ``rng`` (drawn first, as one array), then per column, in chain
        order, the bisection of each record's uniform in its conditional's cumulative row."""
        u = rng.random((size, len(self.columns)))
        got = np.empty((size, len(self.columns)), dtype=np.intp)
        for c, (parents, strides, cdf) in enumerate(self.plans):
            flat = np.zeros(size, dtype=np.intp)
            for p, stride in zip(parents, strides, strict=True):
                flat += got[:, p] * stride
            rows = cdf[flat]
            hit = (rows <= (u[:, c] * rows[:, -1])[:, None]).sum(axis=1)  # bisect_right
            got[:, c] = np.minimum(hit, rows.shape[1] - 1)
        return np.stack([self.cells[c][got[:, c]] for c in range(len(self.columns))], axis=1)


def _restricted(potentials: Any, keep: Mapping[str, np.ndarray]) -> Any:
    """Log-potentials over the kept cells only (the model conditioned on them)."""
    import jax.numpy as jnp

    from decode.decoders import pgm

    CliqueVector, Domain, Factor = pgm.CliqueVector, pgm.Domain, pgm.Factor

    old = potentials.domain
    domain = Domain(list(old.attrs), [len(keep[a]) for a in old.attrs])
    arrays = {}
    for cl in potentials.cliques:
        f = potentials[cl]
        attrs = tuple(f.domain.attrs)
        values = np.asarray(f.values)[np.ix_(*(keep[a] for a in attrs))]
        arrays[cl] = Factor(domain.project(attrs), jnp.asarray(values))
    return CliqueVector(domain, list(potentials.cliques), arrays)


def _conditional(joint: np.ndarray) -> np.ndarray:
    """Normalise the last axis (a parent cell of probability 0 gets a uniform row)."""
    total = joint.sum(axis=-1, keepdims=True)
    uniform = np.full_like(joint, 1.0 / joint.shape[-1])
    return np.where(total > 0, joint / np.where(total > 0, total, 1.0), uniform)
