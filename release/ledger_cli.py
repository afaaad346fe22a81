"""``selpe-audit ledger``: show the lifetime ledgers, or raise a dataset's caps on purpose.

A release never raises a cap (its settings can only lower its own); raising one is this
separate command: it asks for confirmation, must be signed with a key the installation
trusts for raises (``[raise] trusted_keys`` in the root-owned installation file), never goes
above the installation's maximum, and records the key, when, why and the signature in the
dataset's ledger file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.prompt import Confirm
from rich.table import Table

from release.installation import load_installation
from release.ledger import LifetimeLedger, datasets, ledger_folder
from release.ledger_store import open_store
from selpe_audit.cli.command import Command
from selpe_audit.errors import UserError


def _add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="every dataset's caps and spend, or one dataset's "
                                       "releases and raises")
    show.add_argument("--dataset", help="one dataset: its releases and cap raises")
    rse = sub.add_parser("raise", help="raise a dataset's lifetime epsilon (or delta), signed "
                                       "with a raise key the installation trusts")
    rse.add_argument("--dataset", required=True, help="the dataset whose caps to raise")
    rse.add_argument("--epsilon", type=float, help="the new lifetime epsilon (above the cap)")
    rse.add_argument("--delta", type=float, help="the new lifetime delta (above the cap)")
    rse.add_argument("--key", required=True, metavar="PRIVATE.pem",
                     help="the raise key (its public key must be in the installation file's "
                          "[raise] trusted_keys); its key id and signature are recorded")
    rse.add_argument("--reason", required=True, help="why (recorded in the ledger)")
    rse.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for q in (show, rse):
        q.add_argument("--ledger", help="ledger folder (default: the installation's; refused "
                                        "where the installation names or fixes it)")


def _run(args: argparse.Namespace) -> int:
    folder = ledger_folder(args.ledger)
    out = Console(highlight=False)
    if args.ledger_command == "show":
        return _show(out, folder, args.dataset)
    if args.epsilon is None and args.delta is None:
        raise UserError("ledger raise: give --epsilon and/or --delta, the new cap(s)")
    ledger = LifetimeLedger(folder, args.dataset)
    ledger.raise_signer(args.key)  # an untrusted key is refused before anything is asked
    s = ledger.summary()
    new_eps = s["lifetime_epsilon"] if args.epsilon is None else args.epsilon
    new_delta = s["lifetime_delta"] if args.delta is None else args.delta
    question = (f"raise dataset '{args.dataset}' from epsilon {s['lifetime_epsilon']:g}, "
                f"delta {s['lifetime_delta']:g} to epsilon {new_eps:g}, delta {new_delta:g} "
                f"({s['committed_epsilon']:g} spent)? Every release adds to the risk of "
                "the same people")
    if not args.yes:
        if not sys.stdin.isatty():
            raise UserError("ledger raise: not a terminal; pass --yes to confirm")
        if not Confirm.ask(question, default=False):
            out.print("nothing changed")
            return 1
    record = ledger.raise_caps(args.key, args.reason, epsilon=args.epsilon, delta=args.delta)
    out.print(f"dataset '{args.dataset}': lifetime epsilon {new_eps:g}, delta {new_delta:g}; "
              f"raise signed by key {record['by']} at {record['when']} recorded in "
              f"{ledger.where}")
    return 0


def _show(out: Console, location: Path | str, dataset: str | None) -> int:
    inst = load_installation()
    store = open_store(location, inst.ledger_id if location == inst.ledger else None)
    out.print(f"caps in force never pass {inst.where()}: epsilon {inst.max_epsilon:g}, delta "
              f"{inst.max_delta:g}, every person's lifetime cap; {len(inst.raise_keys)} raise "
              "key(s) trusted", markup=False)
    if dataset is None:
        t = Table(title=f"lifetime ledger: {store.where}")
        for col in ("dataset", "epsilon spent", "epsilon cap", "delta spent", "delta cap",
                    "releases", "raises"):
            t.add_column(col)
        for name in datasets(store):
            s = LifetimeLedger(location, name, store=store).summary()
            live = [r for r in s["releases"] if r["status"] != "aborted"]
            t.add_row(name, f"{s['committed_epsilon']:g}", f"{s['lifetime_epsilon']:g}",
                      f"{s['committed_delta']:g}", f"{s['lifetime_delta']:g}",
                      str(len(live)), str(len(s["raises"])))
        out.print(t)
        return 0
    s = LifetimeLedger(location, dataset, store=store).summary()
    out.print(f"dataset '{dataset}' ({s['where']}), created {s['created'] or '(not recorded)'}: "
              f"epsilon {s['committed_epsilon']:g} of {s['lifetime_epsilon']:g}, delta "
              f"{s['committed_delta']:g} of {s['lifetime_delta']:g} committed")
    t = Table(title="releases")
    for col in ("reservation", "status", "epsilon", "delta", "started", "people charged"):
        t.add_column(col)
    for r in s["releases"]:
        t.add_row(r["id"], r["status"], f"{r['epsilon']:g}", f"{r['delta']:g}",
                  r.get("started", ""), "" if r["people"] is None else str(r["people"]))
    out.print(t)
    for r in s["raises"]:
        out.print(f"raised {r['when']} by key {r['by']}: epsilon "
                  f"{r['lifetime_epsilon']['from']:g} -> {r['lifetime_epsilon']['to']:g}, "
                  f"delta {r['lifetime_delta']['from']:g} -> {r['lifetime_delta']['to']:g}; "
                  f"reason: {r['reason']}", markup=False)
    return 0


COMMAND = Command(
    name="ledger",
    help="(enclave) show the lifetime ledgers, or raise a dataset's cap with a signed reason",
    description="The lifetime ledger keeps every release's epsilon and delta and the people it "
                "charged, in the installation's PostgreSQL ledger or one folder per "
                "installation ($SELPE_AUDIT_LEDGER, else /var/lib/selpe-audit/ledger, else "
                "~/.local/share/selpe-audit/ledger). No person's lifetime spend passes the "
                "installation's maximum (/etc/selpe-audit/installation.toml, owned by root); "
                "a dataset's caps are fixed by its first release, and 'ledger raise' is the "
                "only way to raise them, signed with a raise key the installation trusts, and "
                "it records the key, when and why.",
    add_arguments=_add_arguments,
    run=_run,
)
