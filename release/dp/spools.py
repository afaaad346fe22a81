"""The private files OpenDP's Contexts scan (spools): where they go, and their deletion."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import polars as pl

from release.dp import prelude as dp

SPOOL_PREFIX = "selpe-audit-spool-"
SPOOL_ENV = "SELPE_AUDIT_SPOOL"  # a folder for the spool (default: memory, else $TMPDIR)
MEMORY = Path("/dev/shm")


def make_spooled_context(priv_data: pl.DataFrame, **compositor: Any) -> dp.Context:
    """``dp.Context.compositor`` over ``priv_data`` read from a private temporary file.

    OpenDP hands a query's LazyFrame between Python and Rust serialized, data included, so
    a frame held in memory is copied at every crossing: a contingency table over 10^7 rows
    of 18 codes took 7 GB beyond the frame itself (about 11x its bytes). A frame scanned
    from a file crosses as its path, and each query reads only the columns it needs (the
    same table: 1.6 GB, in half the time). The file (Arrow IPC: the codes, or a phrase
    step's units and terms) lies in a folder only this user can open, named after this
    process, in memory (``/dev/shm``) where it has room, else in ``$TMPDIR`` inside the
    enclave (``$SELPE_AUDIT_SPOOL`` names another folder); it is deleted with the Context,
    at exit, and on SIGTERM or SIGINT during a release (`release.pipeline`), and a release
    that starts deletes what a killed one left (`sweep_spools`)."""
    root = spool_root(priv_data.estimated_size())
    folder = Path(tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=root))  # 0700
    _SPOOLS.add(folder)
    path = folder / "rows.arrow"
    try:
        _register(folder)
        with open(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), "wb") as f:
            priv_data.write_ipc(f)
        ctx = dp.Context.compositor(data=pl.scan_ipc(path, memory_map=False), **compositor)
    except BaseException:
        _remove(folder)
        raise
    weakref.finalize(ctx, _remove, folder)
    return ctx


#: this process's spool folders that exist (`remove_spools` deletes them on a signal)
_SPOOLS: set[Path] = set()


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _SPOOLS.discard(folder)
    (registry() / folder.name).unlink(missing_ok=True)


def registry() -> Path:
    """Where every spool folder made is noted, whatever ``$SELPE_AUDIT_SPOOL`` or
    ``$TMPDIR`` said: under the user's home from the password database (no variable moves
    it), so a release sweeps the spools of killed ones wherever they were made."""
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local" / "state" / "selpe-audit" / "spools"


def _register(folder: Path) -> None:
    """Note ``folder`` (its absolute path, in a 0600 file named after it) before any row is
    written there; where the home folder cannot be written (a read-only container), the
    spool goes unnoted and only the sweep of the usual places finds it."""
    reg = registry()
    try:
        reg.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(reg / folder.name, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    except OSError:
        return
    with open(fd, "w", encoding="utf-8") as f:
        f.write(str(folder.resolve()))


def remove_spools() -> None:
    """Delete every spool folder of this process now (a signal handler's last act)."""
    for folder in list(_SPOOLS):
        _remove(folder)


def spool_root(size: int = 0) -> Path:
    """Where spools go: ``$SELPE_AUDIT_SPOOL``, else memory (``/dev/shm``) when it holds
    twice ``size`` bytes, else ``$TMPDIR``."""
    env = os.environ.get(SPOOL_ENV, "").strip()
    if env:
        return Path(env)
    if MEMORY.is_dir() and os.access(MEMORY, os.W_OK | os.X_OK):
        st = os.statvfs(MEMORY)
        if st.f_bavail * st.f_frsize > 2 * size:
            return MEMORY
    return Path(tempfile.gettempdir())


def sweep_spools() -> int:
    """Delete the spool folders of this user's processes that are gone (a release killed
    outright cannot delete its own); how many were deleted."""
    gone = 0
    noted = []
    if registry().is_dir():
        for entry in registry().glob(f"{SPOOL_PREFIX}*"):
            try:
                noted.append((entry, Path(entry.read_text(encoding="utf-8").strip())))
            except (OSError, UnicodeDecodeError):
                continue
    found = [(None, folder) for root in {spool_root(), MEMORY, Path(tempfile.gettempdir())}
             if root.is_dir() for folder in root.glob(f"{SPOOL_PREFIX}*")]
    for entry, folder in noted + found:
        pid = folder.name.removeprefix(SPOOL_PREFIX).split("-", 1)[0]
        if _alive(pid) or not folder.name.startswith(SPOOL_PREFIX):
            continue
        try:
            mine = folder.is_dir() and folder.stat().st_uid == os.getuid()
        except OSError:
            mine = False
        if mine:
            shutil.rmtree(folder, ignore_errors=True)
            gone += 1
        if entry is not None:
            entry.unlink(missing_ok=True)
    return gone


def _alive(pid: str) -> bool:
    """Whether process ``pid`` (a spool folder's) still runs; a folder named otherwise (an
    earlier version's, without a pid) is never taken for gone: its release may be running."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
