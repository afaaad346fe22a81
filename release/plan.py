"""The release's plan: each part of the budget sized to the table before the counts run.

A small table cannot afford what a large one can: at 400 rows a DP vocabulary releases no
term and a class x field cell over six bins drowns in its noise. So, after the rows are read
and before any other mechanism runs, one OpenDP count of the (bounded) rows is released at
`SIZE_SHARE` of the epsilon, and from it and public facts alone - the schema, its bins, the
configuration - the plan fixes:

- per free-text field, whether its DP vocabulary runs (``counts.phrases = "auto"``, the
  default): only when a term written by a share `TERM_SHARE` of the units could reach
  OpenDP's threshold at the vocabulary's (epsilon, delta) - otherwise its share goes to the
  counts, and decoders write no text the release cannot support;
- the model counts' workload (`release.counts.workload`): which class x field marginals,
  over which (merged) bins, which fields alone;
- for a schema with person structure, the people tables (`release.persons`): the visits
  per person always, the first-step tables where the table can afford them
  (`RETURN_SHARE`, `MAX_STEP_NOISE`), their epsilon otherwise going to the counts.

The plan reads no private value but that count (two tables with the same count get the same
plan), and every choice is recorded in the artifact (``budget.plan``) with its reason, for
the reviewer.
"""

from __future__ import annotations

from dataclasses import dataclass

from release.config import ReleaseConfig
from release.counts.workload import Workload, public_workload, size_workload
from release.dp.counts import NoisyCount
from release.dp.partition import partition_threshold
from release.dp.zcdp import calibrate_zcdp_budget
from release.persons import PeoplePlan
from selpe_audit.artifact.records import Plan, PlanChoice
from selpe_audit.schema import Schema

#: share of the release's epsilon for the count of rows the plan is sized by
SIZE_SHARE = 0.05
#: a DP vocabulary runs when a term written by this share of the units could pass its
#: threshold: about 3,700 rows at the default epsilon. On 1,000 demo rows (where the
#: demo's commonest first keywords, written by 4-5 % of its people, pass) it released 1-2
#: keywords that bought the text nothing and cost the records 0.04 / 0.06 of TSTR AUC
#: (benchmarks.budget_parts, "vocabulary forced" against the default)
TERM_SHARE = 0.01
#: the people tables' step tables run when, if this share of the people the row count
#: saw come back (public: about one in five in an emergency department), the expected
#: noise of a step table (half its cells' mean absolute Laplace noise over the returns:
#: its TVD) stays below `MAX_STEP_NOISE`
RETURN_SHARE = 0.2
MAX_STEP_NOISE = 0.5


@dataclass(frozen=True)
class BudgetSplit:
    """The release's (epsilon, delta) by part, computed once from the configuration and the
    schema (public): the plan sizes from it, the stages spend it, the release audit claims
    it. ``size_epsilon`` (the plan's row count) and the vocabularies come out of the
    counts' share; what is left goes to the counts' mechanisms (`marginals`)."""

    counts: tuple[float, float]
    selection: tuple[float, float]
    size_epsilon: float
    vocabulary: tuple[float, float]  # each free-text field's DP vocabulary, when it runs
    vocabulary_fields: tuple[str, ...]  # the fields that may have one (the plan decides)
    people_table: float = 0.0  # each people table's epsilon (a schema with person structure)

    def marginals(self, vocabularies: int, people_tables: int = 0) -> tuple[float, float]:
        """What the counts' mechanisms get when ``vocabularies`` vocabularies and
        ``people_tables`` people tables run."""
        (eps, delta), (v_eps, v_delta) = self.counts, self.vocabulary
        return (eps - self.size_epsilon - vocabularies * v_eps - people_tables * self.people_table,
                delta - vocabularies * v_delta)


def budget_split(cfg: ReleaseConfig, schema: Schema) -> BudgetSplit:
    """The split of ``cfg``'s budget: each free-text field's vocabulary gets
    ``phrase_share`` of the counts' epsilon and half their delta, shared evenly by the
    fields that may have one."""
    fields = tuple(cfg.phrase_fields(schema))
    n = max(1, len(fields))
    counts = (cfg.budget.counts_epsilon, cfg.counts_delta)
    people = 0.0
    if people_structure(cfg, schema):
        tables = 2 + len(schema.persons.transitions)  # visits, each transition, gaps
        people = counts[0] * cfg.persons.person_share / tables
    return BudgetSplit(counts, (cfg.budget.selection_epsilon, cfg.selection_delta),
                       cfg.budget.epsilon * SIZE_SHARE,
                       (counts[0] * cfg.counts.phrase_share / n, counts[1] / 2 / n), fields,
                       people)


def people_structure(cfg: ReleaseConfig, schema: Schema) -> bool:
    """Whether the release measures people: the schema has person structure and the
    privacy unit is the person (one person's several rows are what the tables count)."""
    return schema.persons is not None and cfg.privacy_unit.resolved(schema).unit == "person"


@dataclass(frozen=True)
class ReleasePlan:
    """What the plan chose: the rows it was sized by, the free-text fields whose
    vocabulary runs, the counts' workload, the budget's split, and the artifact's record of
    it all."""

    rows: int
    vocabulary_fields: tuple[str, ...]
    workload: Workload
    record: Plan
    split: BudgetSplit
    people: PeoplePlan | None = None

    @property
    def people_tables(self) -> int:
        return 0 if self.people is None else self.people.tables

    @property
    def marginals(self) -> tuple[float, float]:
        """(epsilon, delta) the counts' mechanisms get, the vocabularies and people tables
        that run paid."""
        return self.split.marginals(len(self.vocabulary_fields), self.people_tables)


def plan_release(cfg: ReleaseConfig, schema: Schema, size: NoisyCount,
                 split: BudgetSplit) -> ReleasePlan:
    """The plan for a table of ``size`` rows (a DP count, which spent ``split``'s
    size_epsilon); public inputs otherwise."""
    rows = max(0, size.value)
    choices = _split_choices(cfg, schema)
    vocab = []
    eps, delta = split.vocabulary
    for name in split.vocabulary_fields:
        _, per_unit, _ = cfg.counts.terms(schema.field(name))
        threshold = partition_threshold(eps, delta, per_unit)
        reach = rows * TERM_SHARE
        if cfg.counts.phrases is True:
            vocab.append(name)
            choices.append(PlanChoice(f"vocabulary: {name}", "runs", (
                f"counts.phrases = true (OpenDP's threshold {threshold} against about "
                f"{rows} rows)")))
        elif reach >= threshold:
            vocab.append(name)
            choices.append(PlanChoice(f"vocabulary: {name}", "runs", (
                f"a term written by {TERM_SHARE:.0%} of about {rows} rows ({reach:.0f}) can "
                f"pass OpenDP's threshold {threshold}")))
        else:
            choices.append(PlanChoice(f"vocabulary: {name}", "skipped", (
                f"a term written by {TERM_SHARE:.0%} of about {rows} rows ({reach:.0f}) "
                f"stays below OpenDP's threshold {threshold}: its epsilon goes to the counts, "
                "and decoders write no text the release cannot support")))
    people = _people_plan(cfg, schema, rows, split, choices)
    tables = 0 if people is None else people.tables
    workload = _workload(cfg, schema, rows, vocab, split.marginals(len(vocab), tables))
    for f in workload.fields:
        choices.append(PlanChoice(f"counts: {f.field}", _margin_words(f.margin, f.edges),
                                  f.reason))
    record = Plan(rows, size.epsilon, size.scale, workload.noise_sigma,
                  workload.signal_sigmas, tuple(choices))
    return ReleasePlan(rows, tuple(vocab), workload, record, split, people)


def _people_plan(cfg: ReleaseConfig, schema: Schema, rows: int, split: BudgetSplit,
                 choices: list[PlanChoice]) -> PeoplePlan | None:
    """The people tables at the table's size: the visits per person always; the step
    tables when their expected noise is small enough (`MAX_STEP_NOISE`), else their epsilon
    goes to the counts. None without person structure (or with the row unit)."""
    if schema.persons is None:
        return None
    if not people_structure(cfg, schema):
        choices.append(PlanChoice("people tables", "skipped", (
            "the privacy unit is the row: a person's several rows are not one unit, so the "
            "release counts visits, not people")))
        return None
    cap, eps = cfg.persons.visits_cap, split.people_table
    cells = max(len(schema.field(f).enum) for f in schema.persons.transitions) \
        * (len(schema.classes) + 1)
    scale = 1 / eps  # one row a person
    noise = 0.5 * cells * scale / max(1.0, RETURN_SHARE * rows)
    steps = noise <= MAX_STEP_NOISE
    transitions = ", ".join(schema.persons.transitions)
    choices.append(PlanChoice("people: visits per person", f"{eps:.3g} epsilon", (
        f"persons.person_share {cfg.persons.person_share:g} of the counts' epsilon, shared by "
        f"the people tables; a person's first {cap} visits are read (persons.visits_cap), "
        f"the count's last value reads '{cap} or more'")))
    choices.append(PlanChoice(
        "people: steps (" + transitions + ", gaps)",
        f"{eps:.3g} epsilon each" if steps else "skipped", (
            f"if {RETURN_SHARE:.0%} of about {rows} rows come back, a step table's noise "
            f"(scale {scale:.3g} over {cells} cells) is about {noise:.2f} of its counts "
            + ("(at most " if steps else "(above ") + f"{MAX_STEP_NOISE:g})"
            + ("" if steps else ": their epsilon goes to the counts, and decode pairs "
               "visits by the visits per person alone"))))
    return PeoplePlan(cap, eps, steps, len(schema.persons.transitions))


def _split_choices(cfg: ReleaseConfig, schema: Schema) -> list[PlanChoice]:
    """The split of the budget between the parts, as configured or by default, and why."""
    b, c = cfg.budget, cfg.counts
    selection = b.selection_share
    out = [PlanChoice("selection", f"{selection:g} of epsilon" if selection else "none", (
        "budget.selection as configured: exemplars for the LLM decoder's prompt"
        if selection else "the default: the model decoder reads no exemplar, and the "
        "counts buy the records more (docs/release.md, \"What each part of the budget "
        "buys\"); set budget.selection for the LLM decoder's exemplars"))]
    gamma, alpha = c.table_shares(schema)
    for part, share, given, words in (("cohorts", gamma, c.gamma, "[[cohorts]]"),
                                      ("rates", alpha, c.alpha, "[[rates]]")):
        if share:
            out.append(PlanChoice(f"counts: {part}", f"{share:.3g} of the counts", (
                f"counts.{'gamma' if part == 'cohorts' else 'alpha'} as configured" if given
                is not None else f"{words} configured; left out, each table gets one "
                "marginal's share: 1 / (the class balance, the fields and these tables)")))
    if c.is_model:
        out.append(PlanChoice("counts: class balance", f"{c.class_share:g} of the marginals",
                              "counts.class_share: a class with a few percent of the rows is "
                              "not zeroed by the noise"))
    return out


def _workload(cfg: ReleaseConfig, schema: Schema, rows: int, vocab: list[str],
              marginals: tuple[float, float]) -> Workload:
    """The model modes' workload at the table's size (`size_workload`), planned with the rho
    the marginals will get (``marginals``: their (epsilon, delta); each vocabulary that runs
    may release terms: a topic column per slot); the public one for a mode without a
    model."""
    c = cfg.counts
    if not c.is_model:
        return public_workload(schema)
    (rho,) = calibrate_zcdp_budget(*marginals, [1.0])
    others = sum(c.table_shares(schema))
    topic_columns = sum(c.terms(schema.field(n))[2] for n in vocab)
    if cfg.topics:  # an embedding codebook: one topic column per free-text field
        topic_columns += len(schema.by_kind("text"))
    return size_workload(schema, rows, rho * (1 - others), cfg.privacy_unit.max_contributions,
                         c.class_share, c.topic_share, topic_columns, c.signal_sigmas)


def _margin_words(margin: str, edges: tuple[float, ...] | None) -> str:
    bins = "" if edges is None else f" over {len(edges) - 1} bins"
    return ("with the class" if margin == "class" else "alone (1-way)") + bins

