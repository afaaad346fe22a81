"""``decode --ray``: the parts of a sharded decode as Ray tasks, merged into one output.

The driver (this process) verifies the artifact first and refuses before anything is
submitted. It then submits one task per part (`decode_shard`), each asking Ray for one GPU
(``--gpu-layers`` other than 0) or one CPU. A task verifies the artifact again on its own
node with the trusted keys, so a tampered artifact is refused on every worker before
anything is generated, and decodes its part (``--shard I``) into
``<out>.shards/part-I-of-S.jsonl`` through that part's own checkpoint beside it. When every
part is in, `decode.merge` checks that each part names the release.json the driver verified
(its SHA-256: an artifact swapped on shared storage after that check, validly signed or not,
is refused naming the part), writes ``--out`` and one provenance and removes the shards.

Retries: a task whose worker dies (killed, out of memory, node lost) is run again by Ray,
up to `RETRIES` times; the new run resumes its part from the checkpoint, so no candidate is
lost or made twice, and a part already written is kept as is. A `UserError` in a task (the
artifact does not verify, a model file is missing) is not retried: the job stops with its
one line. A job stopped midway resumes when the same command runs again.

Progress: the driver reads how many lines each part's checkpoint has (a candidate is
appended and flushed as it is made; the files are read incrementally), and for a part
decoded in chunks the candidates of its finished chunks from their manifest, into one bar.

Shared storage: the artifact, the trusted keys, the output's folder and a ``--model`` are
opened by path on every node, so they must lie at the same path on each (one shared volume;
relative paths are made absolute here). The model goes by path, not through Ray's object
store: a GGUF is hundreds of MB to GBs, the object store would hold a copy in the memory of
every node, and llama.cpp maps a file from disk anyway; the decode image bakes the default
model at the same path on every node.

Ray is the optional ``cluster`` extra, imported only here and only when ``--ray`` is given.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from decode.checkpoint import checkpoint_path
from decode.chunks import MANIFEST, chunk_folder
from decode.merge import merge_shards
from decode.pipeline import DecodeSettings, part_plan, plan, run_decode
from decode.progress import GenerationProgress
from decode.released import released_view
from decode.shards import Part, all_parts, shard_path
from decode.writers import DecodeResult, check_writable, output_format
from selpe_audit.artifact.document import read_release
from selpe_audit.errors import UserError

RETRIES = 3          # runs of a task after its worker died (each resumes from the checkpoint)
POLL_SECONDS = 0.5   # how often the driver reads the parts' checkpoints
NO_RAY = "--ray needs the cluster extra: pip install 'selpe-audit[cluster]'"


@dataclass(frozen=True)
class ShardJob:
    """One part as a worker gets it: paths (the same on every node) and the settings."""

    artifact: Path
    trusted: tuple[Path, ...]
    require_approvals: int
    out: Path                 # the merged output; the part's file lies in its shard folder
    settings: DecodeSettings  # ``shard`` is this part
    release_key: Path | None = None

    @property
    def part(self) -> Part:
        assert self.settings.shard is not None
        return Part(self.settings.shard, self.settings.shards)


def decode_shard(job: ShardJob) -> dict[str, Any]:
    """The task: verify the artifact on this node, then decode one part into its shard file
    (resuming from its checkpoint; a part this decode already wrote is kept). Returns the
    part's provenance."""
    result = run_decode(job.artifact, list(job.trusted), job.require_approvals,
                        shard_path(job.out, job.part), job.settings, Console(quiet=True),
                        reuse=True, release_key=job.release_key)
    return result.provenance_doc


def run_on_ray(artifact: Path, trusted: list[Path], require_approvals: int, out: Path,
               settings: DecodeSettings, address: str | None, shards: int | None = None,
               console: Console | None = None, *,
               release_key: Path | None = None) -> DecodeResult:
    """Decode ``settings.n`` rows in ``shards`` parts (default: one per GPU, or per CPU when
    decoding on CPUs, of the cluster) as Ray tasks on the cluster at ``address`` (None: a
    local Ray), then merge them into ``out``."""
    con = console or Console(stderr=True, highlight=False)
    if settings.shard is not None:
        raise UserError("--shard makes one part in this process; leave it out with --ray, "
                        "which runs every part on the cluster")
    ray = _import_ray()
    output_format(out)
    artifact, out = artifact.resolve(), out.resolve()
    keys = tuple(k.resolve() for k in trusted)
    release_key = release_key.resolve() if release_key is not None else None
    if settings.model is not None:
        settings = replace(settings, model=str(Path(settings.model).expanduser().resolve()))
    rel = read_release(artifact, list(keys), require_approvals,  # refuse before submitting
                       release_key)
    released = released_view(rel)
    check_writable(out)
    started = _connect(ray, address)
    try:
        gpu = settings.gpu_layers != 0
        settings = replace(settings, shards=shards or _cluster_size(ray, gpu))
        whole = plan(released, settings.n, settings.overgenerate)
        candidates = [sum(part_plan(whole, p, settings.overgenerate).candidates.values())
                      for p in settings.parts]
        task = ray.remote(decode_shard).options(num_cpus=1, num_gpus=1 if gpu else 0,
                                                max_retries=RETRIES)
        t0 = time.perf_counter()
        refs = {task.remote(ShardJob(artifact, keys, require_approvals, out,
                                     replace(settings, shard=p.index), release_key)): p
                for p in settings.parts}
        docs = _wait(ray, refs, CandidateWatch(out, candidates), con)
        return merge_shards(out, released, [docs[i] for i in range(settings.shards)],
                            time.perf_counter() - t0, "ray", artifact_sha256=rel.sha256)
    finally:
        if started:
            ray.shutdown()


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise UserError(NO_RAY) from None
    return ray


def _connect(ray: ModuleType, address: str | None) -> bool:
    """Join the cluster at ``address``, or start (or join) a local Ray; True when this call
    connected (and so disconnects at the end), False when this process already was."""
    if ray.is_initialized():
        return False
    local = {"include_dashboard": False} if address is None else {}
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, **local)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"at {address}" if address else "on this machine"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"--ray: cannot start or reach a Ray cluster {where} ({first})") from None
    return True


def _cluster_size(ray: ModuleType, gpu: bool) -> int:
    """One part per GPU of the cluster (per CPU when decoding on CPUs)."""
    kind = "GPU" if gpu else "CPU"
    n = int(ray.cluster_resources().get(kind, 0))
    if n < 1:
        raise UserError(f"the Ray cluster has no {kind}: add {kind} nodes, or decode on CPUs "
                        "with --gpu-layers 0")
    return n


def _wait(ray: ModuleType, refs: dict[Any, Part], watch: CandidateWatch,
          con: Console) -> dict[int, dict[str, Any]]:
    """Every part's provenance, with one progress bar for the job; on a failed part (or
    Ctrl-C) the other tasks are cancelled and their checkpoints stay for a rerun."""
    docs: dict[int, dict[str, Any]] = {}
    pending = list(refs)
    count = len(refs)
    with GenerationProgress(con, watch.total, watch.done(docs),
                            label=f"candidates in {count} shards") as bar:
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_SECONDS)
                for ref in ready:
                    part = refs[ref]
                    docs[part.index] = _result(ray, ref, part)
                    con.print(f"{part.label}: {docs[part.index]['output']['rows']} rows")
                bar.update(watch.done(docs))
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    return docs


def _result(ray: ModuleType, ref: Any, part: Part) -> dict[str, Any]:
    """A task's provenance, or its failure as one line."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, UserError):
            raise UserError(f"{part.label}: {e.cause}") from None
        raise
    except ray.exceptions.RayError as e:  # the worker died more often than it is retried
        raise UserError(f"{part.label}: its worker died {RETRIES + 1} times "
                        f"({type(e).__name__}); rerun the same command to resume from the "
                        "parts' checkpoints") from None


class CandidateWatch:
    """Candidates made so far, counted from each part's checkpoints: the part's own, or in a
    chunked part (`decode.chunks`) the manifest's finished chunks plus the lines of the
    chunk checkpoints now being written."""

    def __init__(self, out: Path, candidates: list[int]) -> None:
        parts = [shard_path(out, p) for p in all_parts(len(candidates))]
        self.paths = [checkpoint_path(path) for path in parts]
        self.folders = [chunk_folder(path) for path in parts]
        self.candidates = candidates
        self.total = sum(candidates)
        self._read: dict[Path, tuple[int, int]] = {}  # per file: (bytes read, newlines seen)
        self._manifests: dict[Path, tuple[float, int]] = {}  # per manifest: (mtime, candidates)

    def done(self, finished: Mapping[int, Any]) -> int:
        return sum(m if i in finished else min(self._made(i), m)
                   for i, m in enumerate(self.candidates))

    def _made(self, i: int) -> int:
        made = self._lines(self.paths[i])
        folder = self.folders[i]
        if folder.is_dir():
            made += self._chunks_done(folder / MANIFEST)
            made += sum(self._lines(p) for p in folder.glob("*.partial.jsonl"))
        return made

    def _chunks_done(self, manifest: Path) -> int:
        try:
            mtime = manifest.stat().st_mtime
            if self._manifests.get(manifest, (None, 0))[0] != mtime:
                doc = json.loads(manifest.read_bytes())
                self._manifests[manifest] = (mtime, sum(
                    sum(e["stats"]["candidates"].values()) for e in doc["done"]))
        except (OSError, ValueError, KeyError, TypeError):  # not yet written, or mid-replace
            pass
        return self._manifests.get(manifest, (None, 0))[1]

    def _lines(self, path: Path) -> int:
        offset, lines = self._read.get(path, (0, 0))
        try:
            with path.open("rb") as fh:
                if fh.seek(0, 2) < offset:  # cut (a torn line) or started anew
                    offset, lines = 0, 0
                fh.seek(offset)
                data = fh.read()
        except OSError:  # not started yet, or finished and removed
            self._read.pop(path, None)
            return 0
        self._read[path] = (offset + len(data), lines + data.count(b"\n"))
        return max(0, self._read[path][1] - 1)  # less the header line
