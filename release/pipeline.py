"""The release, stage by stage (`release.stages`): public inputs, read and charge, the
plan's row count, the people tables (a schema with person structure), phrases, counts,
selection, then the document, written and signed.

Only DP outputs (and post-processing of them) go into the artifact. The console shows
shareable progress lines only; the invalid-row report (row numbers and reasons, never
values) and timings go to the enclave-only log (`release.enclave_log`), outside the
artifact folder. The rows' people are charged in the lifetime ledger after reading and
before any mechanism runs (a person the release would take past their lifetime cap stops
it, refunded, or is left out on request).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from release import dp
from release.config import ReleaseConfig
from release.dp.spools import remove_spools, sweep_spools
from release.dp.unit import UNIT_COL, PrivacyUnit
from release.installation import Installation, load_installation
from release.ledger import LifetimeLedger
from release.ledger_people import NO_LINKAGE_TO_LEAVE_OUT
from release.spent import Spent, check_within_budget, total_spent
from release.stages.counts import release_counts
from release.stages.document import build_document
from release.stages.persons import release_people
from release.stages.phrases import code_rows
from release.stages.prepare import check_writable, load_public_inputs, person_field
from release.stages.rows import read_and_charge
from release.stages.selection import private_features, progress_reporter, select_exemplars
from release.stages.sign import write_and_sign
from release.stages.sizing import size_and_plan
from selpe_audit.artifact.signing import key_id, load_private_key
from selpe_audit.errors import UserError
from selpe_audit.models import Models, shared
from selpe_audit.schema import load_schema


@dataclass(frozen=True)
class ReleaseResult:
    path: Path
    doc: dict[str, Any]


def run_release(cfg: ReleaseConfig, console: Console | None = None,
                models: Models | None = None,
                installation: Installation | None = None) -> ReleaseResult:
    """One release of ``cfg``; the LLM and the embedder come from ``models`` (default: the
    process's own, `selpe_audit.models.shared`), loaded there on first use; the lifetime
    caps' ceiling from ``installation`` (default: the installation file). The private
    texts the release embedded are forgotten when it ends, however it ends."""
    models = models or shared()
    dp.enable()
    sweep_spools()  # what a release killed outright left behind (its process is gone)
    try:
        with _spools_removed_on_signals():
            return _release(cfg, console or Console(stderr=True, highlight=False), models,
                            installation or load_installation())
    finally:
        models.forget_private_texts()


def _release(cfg: ReleaseConfig, con: Console, models: Models,
             installation: Installation) -> ReleaseResult:
    schema = load_schema(cfg.schema)
    installation.check_schema(schema.sha256())
    installation.check_unit(cfg.privacy_unit.resolved(schema).unit, schema)
    linkage = installation.linkage_fields(schema)  # required and missing: refused here
    if cfg.leave_out_exhausted and not linkage:
        raise UserError(f"{NO_LINKAGE_TO_LEAVE_OUT}; no data was read")
    cfg.check(schema)
    key = load_private_key(cfg.release_key)
    check_writable(cfg.out)
    person = person_field(cfg, schema)
    unit = PrivacyUnit(UNIT_COL if person else None, cfg.privacy_unit.max_contributions)
    ledger = LifetimeLedger(cfg.budget.lifetime_ledger, cfg.dataset, cfg.budget.lifetime_epsilon,
                            cfg.budget.lifetime_delta, installation)
    inputs = load_public_inputs(cfg, schema, models, con)  # failures here cost nothing
    table, reservation = read_and_charge(cfg, schema, ledger, person, con)
    log = reservation.log
    # From here on DP mechanisms run: the reservation stands whatever happens.
    ledger.start_measuring(reservation.id)
    t_counts = time.perf_counter()
    with con.status(f"noisy counts ({cfg.counts.mode}, OpenDP)"):
        frame, sized = size_and_plan(cfg, schema, table.frame, unit, person, log)
        people = release_people(schema, table.frame, person, sized.plan, log)
        before = sized.spent + (people.spent if people is not None else Spent())
        coded = code_rows(cfg, schema, table.frame, frame, unit, person, inputs.codebooks,
                          inputs.embedder, log, sized.plan)
        del frame
        if inputs.source is None:  # counts only: the typed rows are not read again (2.3 GB
            del table  # at 10^7 rows, no longer under the counts' peak)
        counts = release_counts(cfg, schema, coded, unit, inputs.codebooks, sized.plan,
                                before)
    log.write(f"counts ({cfg.counts.mode}) in {time.perf_counter() - t_counts:.2f} s")
    stages = [sized, *([people] if people is not None else []), coded, counts]
    selection = None
    if inputs.source is not None and inputs.kernel is not None:
        t_selection = time.perf_counter()
        with con.status(f"selection ({cfg.selection.mode})") as status:
            priv = private_features(cfg, schema, table.frame, inputs.kernel, person, log)
            del table
            selection = select_exemplars(cfg, schema, priv, inputs.kernel, inputs.source,
                                         counts.block.view,
                                         progress_reporter(con, log, status.update))
            del priv
        log.write(f"selection ({cfg.selection.mode}) in "
                  f"{time.perf_counter() - t_selection:.2f} s")
        stages.append(selection)
    spent = total_spent(stages)
    check_within_budget(spent, cfg.budget.epsilon, cfg.release_delta)
    doc = build_document(cfg, schema, key_id(key.public_key()), stages, counts.block,
                         selection, lifetime=reservation.lifetime,
                         source_key=ledger.store.key(), plan=sized.plan,
                         persons=people.block if people is not None else None)
    path, written = write_and_sign(cfg, doc)
    ledger.finish(reservation.id, "released", epsilon=spent.epsilon, delta=spent.delta)
    log.write(f"wrote and signed the artifact {time.perf_counter() - reservation.started:.2f} "
              f"s after the start; epsilon {spent.epsilon:g}, delta {spent.delta:g}")
    con.print(f"wrote and signed {path}; epsilon spent {spent.epsilon:g} of "
              f"{cfg.budget.epsilon:g} (timings and the invalid-row report: {cfg.enclave_log})")
    return ReleaseResult(path, written)


@contextmanager
def _spools_removed_on_signals() -> Iterator[None]:
    """On SIGTERM or SIGINT during the release, delete its temporary files of private rows,
    then die of that signal as the process would have (nothing is raised: the signal may
    arrive inside a callback OpenDP's Rust runs, which must not unwind); the handlers in
    force before come back after. Only the main thread can set a handler; elsewhere
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def die(signum: int, _frame: Any) -> None:
        remove_spools()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    before = {s: signal.signal(s, die) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
