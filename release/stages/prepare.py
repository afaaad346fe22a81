"""Before any private row is read: the output folder, the models, the candidate source and
the topic codebooks (public inputs only), so that a failure here costs no budget."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from release.config import ReleaseConfig
from release.selection.candidates import CandidateSource, candidate_source
from release.topics import Codebook, build_codebook, public_topic_texts
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.kernel.embeddings import Embedder
from selpe_audit.models import Models
from selpe_audit.schema import Schema

#: LLM candidates per class for the topic codebooks when no public pool is configured
TOPIC_TEXTS_PER_CLASS = 12


@dataclass(frozen=True)
class PublicInputs:
    """What the release loads before reading a row: the selection's candidate source and
    kernel (None when the budget gives selection no share), the embedder they and the
    topics share, and the topic codebooks per free-text field."""

    source: CandidateSource | None
    kernel: Kernel | None
    embedder: Embedder | None
    codebooks: dict[str, Codebook]


def load_public_inputs(cfg: ReleaseConfig, schema: Schema, models: Models,
                       con: Console) -> PublicInputs:
    """The models and public texts the release needs, loaded before any row is read."""
    sel = cfg.selection
    source, kernel, embedder, codebooks = None, None, None, {}
    if cfg.selects:
        with con.status("loading the candidate generator and the embedder"):
            source = candidate_source(schema, sel.candidates, sel.model, sel.gpu_layers,
                                      sel.seed, models)
            kernel = Kernel(schema, None, KernelConfig(channels=sel.channels))
            if kernel.semantic_channels:  # numeric channels alone need no model
                kernel.embedder = embedder = models.embedder()
    if cfg.topics > 0 and schema.by_kind("text"):
        with con.status("topic codebooks from public texts"):
            # one embedder (and private cache) for topics and selection: each text once
            embedder = embedder or models.embedder()
            codebooks = _codebooks(cfg, schema, source, embedder, models)
    return PublicInputs(source, kernel, embedder, codebooks)


def _codebooks(cfg: ReleaseConfig, schema: Schema, source: CandidateSource | None,
               embedder: Embedder, models: Models) -> dict[str, Codebook]:
    """Per free-text field, k public anchor texts: from the pool, or from LLM candidates
    (the selection's source when it runs, else one made from the same settings)."""
    sel = cfg.selection
    if source is None:
        source = candidate_source(schema, sel.candidates, sel.model, sel.gpu_layers, sel.seed,
                                  models)
    return {name: build_codebook(name, texts, cfg.topics, embedder, sel.seed, label)
            for name, (texts, label) in public_topic_texts(source, schema,
                                                           TOPIC_TEXTS_PER_CLASS).items()}


def person_field(cfg: ReleaseConfig, schema: Schema) -> str | None:
    """The column that names a row's person, or None for the row unit."""
    pu = cfg.privacy_unit.resolved(schema)
    return None if pu.unit == "row" else (pu.id_field or schema.id_field)


def check_writable(out: Path) -> None:
    """The artifact folder can be written, and no symlink can send a write elsewhere: the
    folder, the folders on its path and everything already in it are no symlinks."""
    absolute = Path(os.path.abspath(out))
    for p in [absolute, *absolute.parents]:
        if p.is_symlink():
            raise UserError(f"{out}: {p} is a symlink; give --out a real folder (a release "
                            "must not write, or delete, files where a link points)")
    if out.is_dir():
        for root, dirs, files in os.walk(out):
            for name in [*dirs, *files]:
                if (Path(root) / name).is_symlink():
                    raise UserError(f"{out}: it holds a symlink ({Path(root) / name}); give "
                                    "--out a folder without links, or a new one")
    probe = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
    if not os.access(probe, os.W_OK):
        raise UserError(f"{out}: output folder is not writable")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")
