"""``selpe-audit keygen``: an Ed25519 key pair for signing releases or approving them."""

from __future__ import annotations

import argparse

from rich.console import Console

from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.cli.command import Command


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="private key file to write, e.g. keys/release.pem; the public "
                                "key goes next to it as keys/release.pub.pem")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")


def _run(args: argparse.Namespace) -> int:
    priv, pub, kid = generate_keypair(args.path, force=args.force)
    out = Console(highlight=False)
    out.print(f"key id      {kid}")
    out.print(f"private key {priv}  (mode 0600: keep it inside the enclave or on your machine)")
    out.print(f"public key  {pub}  (give this to whoever must verify your signatures)")
    return 0


COMMAND = Command(
    name="keygen",
    help="make an Ed25519 key pair (release key or reviewer key)",
    description="Write a new Ed25519 private key (PEM, mode 0600) and its public key "
                "(PEM). The release key signs release.json; reviewer keys approve it.",
    add_arguments=_add_arguments,
    run=_run,
)
