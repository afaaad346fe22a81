"""Decode in Python (off-site): `open_artifact` verifies an artifact exactly as ``selpe-audit
decode`` does, and `Artifact.sample` draws synthetic records from it into a DataFrame.

The command is a thin layer over `decode_to` (argument parsing and printing only). Nothing
here imports the release stage: an analyst's notebook holds only the artifact.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from decode.pipeline import DEFAULT_DECODER, DecodeSettings, run_decode
from decode.writers import DecodeResult
from selpe_audit.artifact.document import read_release
from selpe_audit.artifact.records import Guarantees
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.errors import UserError

if TYPE_CHECKING:
    import polars as pl

__all__ = ["Artifact", "decode_settings", "decode_to", "gpu_layers", "open_artifact"]

GPU_ENV = "SELPE_AUDIT_GPU_LAYERS"
#: DecodeSettings' fields a caller sets by keyword (n, decoder and seed are named arguments)
SETTINGS = frozenset(f.name for f in fields(DecodeSettings)) - {"n", "decoder", "seed"}


@dataclass(frozen=True)
class Artifact:
    """A release artifact whose signatures were verified against keys you trust.

    Attributes
    ----------
    path : Path
        The artifact folder.
    document : ReleaseView
        The artifact, typed and checked (``document.doc`` is the JSON as signed).
    approvals : tuple of str
        Key ids of the trusted reviewers who approved it (counted against ``release_key``).
    """

    path: Path
    document: ReleaseView
    approvals: tuple[str, ...]
    _trust: tuple[Path, ...]
    _release_key: Path | None
    _require_approvals: int

    @property
    def guarantee(self) -> Guarantees:
        """What the release's (epsilon, delta) means, in numbers and in plain words."""
        return self.document.guarantees

    @property
    def epsilon(self) -> float:
        """The epsilon the release spent (the guarantee's)."""
        return float(self.document.ledger.total_epsilon)

    def sample(self, n: int, *, decoder: str = DEFAULT_DECODER, seed: int = 0,
               progress: bool = True, **settings: Any) -> pl.DataFrame:
        """``n`` synthetic records as a polars DataFrame (``.to_pandas()`` for pandas).

        Parameters
        ----------
        n : int
            Rows to draw.
        decoder : {"llm", "model", "marginals"}
            As ``--decoder`` (default: the command's).
        seed : int
            The seed of every draw: the same seed gives the same rows as the command.
        progress : bool
            Show the progress bar (on stderr).
        **settings
            Any other decode setting by name (``overgenerate``, ``select_top``, ``fit``,
            ``hybrid``, ``chunk_rows``, ``model``, ``gpu_layers``...).

        Raises
        ------
        UserError
            A bad setting or an artifact that no longer verifies, in one line.
        """
        import polars as pl

        with tempfile.TemporaryDirectory(prefix="selpe-sample-") as tmp:
            out = Path(tmp) / "records.parquet"
            self.sample_to(out, n, decoder=decoder, seed=seed, progress=progress, **settings)
            return pl.read_parquet(out)

    def sample_to(self, path: str | Path, n: int, *, decoder: str = DEFAULT_DECODER,
                  seed: int = 0, progress: bool = True, **settings: Any) -> DecodeResult:
        """Decode ``n`` records into a .parquet, .csv or .jsonl file, in chunks (memory flat
        in ``n``, resumable after a crash), with ``<path>.provenance.json`` beside it: for
        sizes that should not sit in memory. Parameters as `sample`."""
        console = Console(stderr=True, highlight=False, quiet=not progress)
        return decode_to(self.path, self._trust, self._require_approvals, Path(path),
                         decode_settings(n, decoder=decoder, seed=seed, **settings), console,
                         release_key=self._release_key)

    def _repr_html_(self) -> str:
        from selpe_audit.review.page import render_summary_html

        return render_summary_html(dict(self.document.doc))


def open_artifact(path: str | Path, *, release_key: str | Path | None = None,
                  trust: Iterable[str | Path] = (), require_approvals: int = 0) -> Artifact:
    """Verify an artifact's signatures, as ``selpe-audit decode`` does, and open it.

    Parameters
    ----------
    path : path
        The artifact folder (holds ``release.json``).
    release_key : path, optional
        The releaser's public key: its signature is required, and approvals are the other
        trusted keys' signatures.
    trust : paths
        Reviewers' (or the releaser's) public keys you trust.
    require_approvals : int
        Distinct trusted reviewer signatures required besides the release key's.

    Raises
    ------
    UserError
        No trusted key, a signature that fails, too few approvals, a malformed document.
    """
    if require_approvals < 0:
        raise UserError("require_approvals must be >= 0")
    trusted = tuple(Path(t) for t in ([trust] if isinstance(trust, str | Path) else trust))
    key = Path(release_key) if release_key is not None else None
    rel = read_release(path, list(trusted), require_approvals, key)
    return Artifact(Path(path), ReleaseView.checked(rel.doc), rel.approvals, trusted, key,
                    require_approvals)


def decode_settings(n: int, *, decoder: str = DEFAULT_DECODER, seed: int = 0,
                    **settings: Any) -> DecodeSettings:
    """Checked settings; GPU layers default to ``$SELPE_AUDIT_GPU_LAYERS`` (else 0)."""
    unknown = sorted(set(settings) - SETTINGS)
    if unknown:
        raise UserError(f"unknown decode setting '{unknown[0]}'; the settings are "
                        f"{', '.join(sorted(SETTINGS))}")
    settings["gpu_layers"] = gpu_layers(settings.get("gpu_layers"))
    return DecodeSettings(n=n, decoder=decoder, seed=seed, **settings)


def decode_to(artifact: Path, trusted: Iterable[Path], require_approvals: int, out: Path,
              settings: DecodeSettings, console: Console | None = None, *,
              release_key: Path | None = None, ray: str | None = None,
              ray_parts: int | None = None) -> DecodeResult:
    """The decode of the command and of `Artifact.sample_to`: verified, then in this
    process, or as Ray tasks (``ray``: the head's address, "" a local Ray; ``ray_parts``:
    the parts, default one per GPU or CPU of the cluster)."""
    if require_approvals < 0:
        raise UserError("--require-approvals must be >= 0")
    if ray is not None:
        if settings.shard is not None:
            raise UserError("--shard makes one part in this process; leave it out with --ray, "
                            "which runs every part on the cluster")
        from decode.cluster import run_on_ray  # Ray only when asked for

        return run_on_ray(artifact, list(trusted), require_approvals, out, settings,
                          ray or None, ray_parts,
                          console or Console(stderr=True, highlight=False),
                          release_key=release_key)
    return run_decode(artifact, list(trusted), require_approvals, out, settings, console,
                      release_key=release_key)


def gpu_layers(given: int | None) -> int:
    """``given``, else $SELPE_AUDIT_GPU_LAYERS (the decode container sets -1), else 0."""
    if given is not None:
        return given
    env = os.environ.get(GPU_ENV, "").strip()
    if not env:
        return 0
    try:
        return int(env)
    except ValueError:
        raise UserError(f"${GPU_ENV} must be an integer (layers to offload, -1 = all)") from None
