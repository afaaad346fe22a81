"""Reserve the budget, read the private rows once, and charge their people.

The reservation comes first (a dataset past its lifetime cap reads nothing); the people in
the rows are matched to everyone the ledger charged and refused, or left out on request,
if this release would take one past their lifetime cap. Until the first mechanism runs
(`LifetimeLedger.start_measuring`, by the caller) an error refunds the reservation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import polars as pl
from rich.console import Console

from release.config import ReleaseConfig
from release.enclave_log import EnclaveLog
from release.ledger import LifetimeLedger
from release.private_data import PrivateTable, read_private_rows
from selpe_audit.artifact.records import LifetimeStamp
from selpe_audit.memory import return_freed_memory
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class LedgerTicket:
    """The ledger's reservation that pays for the release (``id``), what the artifact says
    of the ledger, the release's enclave log (tagged with the reservation) and when the
    release started reading."""

    id: str
    lifetime: LifetimeStamp
    log: EnclaveLog
    started: float


def read_and_charge(cfg: ReleaseConfig, schema: Schema, ledger: LifetimeLedger,
                    person_field: str | None, con: Console,
                    ) -> tuple[PrivateTable, LedgerTicket]:
    """Reserve ``cfg``'s epsilon, read its rows and charge their people in ``ledger``: the
    rows the release reads (people past their cap left out on request) and the
    reservation."""
    planned = cfg.budget.epsilon
    rid = ledger.reserve(planned, cfg.release_delta, note=f"release to {cfg.out}")
    spent_eps, spent_delta = ledger.spent()
    cap_eps, cap_delta = ledger.caps()
    delta_note = f"; delta {spent_delta:g} of {cap_delta:g}" if cfg.release_delta else ""
    con.print(f"[bold]release[/] {cfg.dataset}: epsilon {planned:g} reserved in the lifetime "
              f"ledger ({spent_eps:g} of {cap_eps:g} now committed{delta_note})")
    log = EnclaveLog(cfg.enclave_log, tag=f"[{cfg.dataset} {rid}]")
    t0 = time.perf_counter()
    try:
        log.write(f"release started; epsilon {planned:g} reserved")
        with con.status("reading private rows (once)"):
            table = read_private_rows(cfg.source, schema, invalid=cfg.invalid_rows)
        _report_table(log, table)
        log.write(f"read and checked {table.frame.height} rows in "
                  f"{time.perf_counter() - t0:.2f} s")
        table = _charge(cfg, schema, ledger, rid, table, person_field, log)
        log.write(f"read, checked and charged the rows' people in "
                  f"{time.perf_counter() - t0:.2f} s")
    except BaseException:
        ledger.abort(rid)
        raise
    lifetime = LifetimeStamp(ledger.store.ledger_id(), cfg.dataset, rid, cap_eps, cap_delta,
                             spent_eps, spent_delta)
    return table, LedgerTicket(rid, lifetime, log, t0)


def _charge(cfg: ReleaseConfig, schema: Schema, ledger: LifetimeLedger, rid: str,
            table: PrivateTable, person_field: str | None, log: EnclaveLog) -> PrivateTable:
    """The people in these rows, matched to every person the ledger charged: refused if one
    would pass their lifetime cap (or, asked to, left out before any mechanism)."""
    t_bind = time.perf_counter()
    charge = ledger.charge_people(rid, table.frame, schema, person_field,
                                  cfg.leave_out_exhausted)
    if charge.left_out:
        table = replace(table, frame=table.frame.filter(pl.Series(charge.keep)))
        log.write(f"left out {charge.left_out} person(s) whose lifetime epsilon this "
                  "release would pass (--leave-out-exhausted)")
    return_freed_memory()
    log.write(f"charged {charge.people} people (the highest spend among them before: "
              f"{charge.highest_before:g}) in {time.perf_counter() - t_bind:.2f} s")
    return table


def _report_table(log: EnclaveLog, table: PrivateTable) -> None:
    """Enclave log only: the number of invalid rows is private and never shipped."""
    if table.ignored_columns:
        log.write(f"ignored {len(table.ignored_columns)} column(s) not in the schema: "
                  f"{', '.join(table.ignored_columns)}")
    if table.dropped_rows:
        log.write(f"dropped {table.dropped_rows} invalid row(s) (--invalid-rows drop); "
                  "first problems:")
        for p in table.problems[:10]:
            log.write(f"  row {p.row}, field '{p.field}': {p.reason}")
