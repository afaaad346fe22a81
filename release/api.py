"""The release in Python (inside the enclave): `release` is ``selpe-audit release`` as a
function, the same checks, plan, ledger and outputs, and it also takes a DataFrame.

The command is a thin layer over `release_with` (argument parsing and printing only). No
object this module returns holds private rows: a `Release` is the signed artifact's path
and its document.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from release.config import ReleaseConfig
from release.config_file import load_config
from release.database import is_database_url
from release.frame_source import FrameSource
from release.pipeline import run_release
from selpe_audit.artifact.records import Guarantees, LedgerEntry
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.errors import UserError

__all__ = ["Release", "release", "release_with"]


@dataclass(frozen=True)
class Release:
    """A written and signed release: what the reviewer reads before export.

    Attributes
    ----------
    path : Path
        The artifact folder (holds ``release.json`` and its signatures).
    document : ReleaseView
        The artifact, typed (``document.doc`` is the JSON as written).
    """

    path: Path
    document: ReleaseView

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """Every mechanism the release ran, with its scale, epsilon, delta (and rho)."""
        return self.document.ledger.entries

    @property
    def guarantee(self) -> Guarantees:
        """What the spent (epsilon, delta) means, in numbers and in words."""
        return self.document.guarantees

    def review_html(self) -> str:
        """The reviewer's page (``selpe-audit review``'s review.html) as one string."""
        from selpe_audit.review.page import render_review_html

        return render_review_html(dict(self.document.doc))

    def _repr_html_(self) -> str:
        from selpe_audit.review.page import render_summary_html

        return render_summary_html(dict(self.document.doc))


def release(data: Any, schema: str | Path, *, epsilon: float, key: str | Path,
            out: str | Path, dataset: str | None = None, config: str | Path | None = None,
            progress: bool = True, **settings: Any) -> Release:
    """Release ``data`` once with OpenDP and write the signed artifact into ``out``.

    Parameters
    ----------
    data : path, str, polars.DataFrame, pandas.DataFrame or pyarrow.Table
        The private rows: a .csv, .parquet or .jsonl file, a ``postgresql://`` URL (with the
        ``query`` or ``table`` setting), or a table already in memory.
    schema : path
        The dataset's JSON Schema.
    epsilon : float
        The whole release's epsilon (checked against the lifetime ledger first).
    key : path
        The release signing key (PEM), as ``--key``.
    out : path
        The artifact folder to write.
    dataset : str, optional
        The ledger's dataset name (default: the file's stem; required for a DataFrame or a
        query).
    config : path, optional
        A release TOML file; ``settings`` override it as flags do.
    progress : bool
        Show the release's progress lines (on stderr); False: silent.
    **settings
        Any setting of ``selpe-audit release`` by its flat name (``counts_mode``,
        ``counts_share``, ``selection_share``, ``lifetime_ledger``, ``unit``...), typed.

    Returns
    -------
    Release
        The artifact's path and its document.

    Raises
    ------
    UserError
        Bad input of any kind, with the command's one-line message.
    """
    overrides = {**settings, "data": _data(data), "schema": Path(schema),
                 "epsilon": epsilon, "release_key": Path(key), "out": Path(out),
                 "dataset": dataset}
    if "counts_share" in settings and "selection_share" not in settings:
        overrides["selection_share"] = 1 - float(settings["counts_share"])
    console = Console(stderr=True, highlight=False, quiet=not progress)
    return release_with(load_config(config, overrides), console)


def release_with(cfg: ReleaseConfig, console: Console | None = None) -> Release:
    """The release of a checked configuration (the command's and the function's path)."""
    result = run_release(cfg, console)
    return Release(result.path.parent, ReleaseView.checked(result.doc))


def _data(data: Any) -> Path | str | FrameSource:
    frame = FrameSource.of(data)
    if frame is not None:
        return frame
    if isinstance(data, str | Path):
        return str(data) if is_database_url(str(data)) else Path(data)
    raise UserError(f"data: a {type(data).__name__} is not a source of rows; give a file "
                    "path, a postgresql:// URL, or a polars or pandas DataFrame or pyarrow "
                    "Table")
