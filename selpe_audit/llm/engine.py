"""The llama.cpp batch engine: several sequences of one context, a grammar sampler each.

Throughput, on a CPU and a 262k-token vocabulary:

- The shared prompt prefixes (Stage I prompt, Stage II few-shot pairs, a text prompt's
  few-shot part alone and followed by each shared topic's texts) are evaluated once
  into reserved sequences and shared with each working sequence by ``llama_memory_seq_cp``
  (a unified KV cache, so sharing copies nothing); they stay cached across calls.
- ``n_parallel`` sequences decode together, one token each per ``llama_decode`` call.
- Sampling runs top-k/top-p/temperature/dist *first* and checks the single chosen token
  against the grammar; only if it is rejected is the grammar applied to more candidates
  (the 512, then 8192 most likely tokens, then the whole vocabulary, until the valid tokens
  left out could not matter). Accepting a valid draw, else drawing from the masked
  distribution, gives the same distribution as masking first (it is rejection sampling),
  as llama.cpp's own common sampler does, at a fraction of the cost.
- Text the grammar forces (keys, separators, the rest of an enum value once it is
  unambiguous, a fixed label) is fed without sampling (``fast_forward``), decoded in the
  same batch as the token before it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from selpe_audit.llm.config import GenerationConfig, GenerationError, GenerationStats
from selpe_audit.llm.grammar import RecordLayout
from selpe_audit.llm.models import LLM, PREFIX_SEQS

# Token data as llama.cpp lays it out (llama_token_data: int32 id, float logit, float p).
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
# On a rejected draw, first try the grammar on shortlists of the most likely tokens ...
_SHORTLISTS = (512, 8192)
# ... and accept that shortlist if the valid tokens outside it can carry at most this much
# probability relative to the best valid token (below float32 resolution of the draw).
_MASS_TOLERANCE = 1e-7


# ----- one request on one sequence -------------------------------------------------------

@dataclass
class Request:
    """Decode ``suffix`` after shared prefix number ``prefix``, then sample until done."""

    prefix: int
    suffix: list[int]
    seed: int
    max_tokens: int
    constrained: bool
    stop: bytes = b""  # unconstrained: the text ends before the first of these bytes
    tag: Any = None
    avoid: Sequence[Sequence[int]] = ()  # unconstrained: token texts it may not copy


#: An unconstrained text may start like a text in its request's ``avoid`` for this many
#: tokens; the token that would continue the copy is then never sampled (a small model
#: otherwise repeats its few-shot examples word for word).
AVOID_SHARED = 3


def copy_bans(out: Sequence[int], avoid: Sequence[Sequence[int]]) -> list[int]:
    """Tokens that would continue a copy of a text in ``avoid`` past `AVOID_SHARED` tokens:
    ``a[m]`` for each ``a`` whose first ``m = len(out) >= AVOID_SHARED`` tokens are ``out``."""
    m, prefix = len(out), tuple(out)
    if m < AVOID_SHARED:
        return []
    return [a[m] for a in avoid if len(a) > m and tuple(a[:m]) == prefix]


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common head of two token lists."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@dataclass
class _Slot:
    seq: int
    request: Request
    chain: Any
    pos: int
    pending: list[int]
    out: bytearray = field(default_factory=bytearray)
    n_out: int = 0
    tokens: list[int] = field(default_factory=list)  # sampled (unconstrained requests)


class BatchEngine:
    """Runs requests on ``n_parallel`` sequences of one context, a grammar sampler each."""

    def __init__(self, llm: LLM, config: GenerationConfig, grammar: str | None,
                 n_parallel: int, stats: GenerationStats,
                 layout: RecordLayout | None = None) -> None:
        self.llm, self.lc, self.config, self.stats = llm, llm.lc, config, stats
        self.layout = layout if config.fast_forward else None
        self.n_parallel = max(1, min(n_parallel, llm.n_seq))
        lc = self.lc
        self._grammars: list[Any] = []
        if grammar is not None:
            for _ in range(self.n_parallel):
                g = lc.llama_sampler_init_grammar(llm.vocab, grammar.encode("utf-8"), b"root")
                if not g:
                    self.close()
                    raise ValueError("llama.cpp rejected the record grammar")
                self._grammars.append(g)
        self._cell = (lc.llama_token_data * 1)()
        self._one = lc.llama_token_data_array(self._cell, 1, -1, False)
        self._cand = np.zeros(llm.n_vocab, dtype=_TOKEN_DATA)
        self._cand_ptr = self._cand.ctypes.data_as(ctypes.POINTER(lc.llama_token_data))
        self._all_ids = np.arange(llm.n_vocab, dtype=np.int32)
        self._batch = lc.llama_batch_init(llm.n_batch, 0, 1)
        # Markup and control tokens are never sampled (the grammar alone would admit
        # "<start_of_image>" inside a string); their logits are set to -inf in place.
        self._banned = np.asarray(llm.markup_tokens, dtype=np.int64)

    def close(self) -> None:
        for g in self._grammars:
            self.lc.llama_sampler_free(g)
        self._grammars = []
        if getattr(self, "_batch", None) is not None:
            self.lc.llama_batch_free(self._batch)
            self._batch = None

    # --- prefixes ---
    def load_prefixes(self, prefixes: Sequence[list[int]]) -> None:
        """Make reserved sequence j hold ``prefixes[j]``, evaluating only what changed, and
        empty the reserved sequences after them.

        A prefix that starts like one loaded before it (a class's few-shot prompt followed
        by one topic's texts) shares that one's cached head and evaluates only the rest."""
        for j, tokens in enumerate(prefixes):
            seq = self.llm.prefix_seq(j)
            keep = _common(self.llm.cached.get(seq, []), tokens)
            donor, shared = max(((self.llm.prefix_seq(i), _common(prefixes[i], tokens))
                                 for i in range(j)), key=lambda d: d[1], default=(seq, 0))
            if shared > keep:
                self.llm.remove_seq(seq)
                self.llm.copy_seq(donor, seq, shared)
                keep = shared
            else:
                self.llm.remove_seq(seq, keep)
            self.llm.cached[seq] = tokens[:keep]
            for start in range(keep, len(tokens), self.llm.n_batch):
                chunk = tokens[start:start + self.llm.n_batch]
                self._fill([(t, start + i, seq, False) for i, t in enumerate(chunk)])
                self._decode()
                self.stats.prompt_tokens += len(chunk)
            self.llm.cached[seq] = list(tokens)
        for j in range(len(prefixes), PREFIX_SEQS):  # an earlier caller's: free the cells
            seq = self.llm.prefix_seq(j)
            if self.llm.cached.pop(seq, None):
                self.llm.remove_seq(seq)

    # --- the batch ---
    def _fill(self, items: list[tuple[int, int, int, bool]]) -> None:
        b = self._batch
        for i, (tok, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0], b.logits[i] = seq, logits
        b.n_tokens = len(items)

    def _decode(self) -> None:
        rc = self.lc.llama_decode(self.llm.ctx, self._batch)
        if rc != 0:
            raise GenerationError(
                f"llama_decode failed (code {rc}): the KV cache is full; "
                "load the model with a larger n_ctx or use fewer parallel sequences")

    # --- sampling ---
    def _new_chain(self, seed: int) -> Any:
        lc, cfg = self.lc, self.config
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        if cfg.temperature <= 0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
            return chain
        if cfg.top_k > 0:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(cfg.top_k))
        if cfg.top_p < 1:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_p(cfg.top_p, 1))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(cfg.temperature))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def allows(self, grammar: Any, token: int) -> bool:
        """Whether ``grammar`` in its current state admits ``token`` next (one-token check)."""
        self._cell[0].id, self._cell[0].logit, self._cell[0].p = token, 0.0, 0.0
        self._one.size, self._one.selected, self._one.sorted = 1, -1, False
        self.lc.llama_sampler_apply(grammar, ctypes.byref(self._one))
        return self._cell[0].logit != float("-inf")

    def _masked_draw(self, chain: Any, grammar: Any, idx: int,
                     ids: np.ndarray | None) -> int | None:
        """Mask candidates by the grammar, then draw with the chain.

        ``ids`` None means the whole vocabulary. With a subset (the most likely tokens) the
        draw is refused (None) unless the valid tokens it may miss - fewer than top_k, each
        less likely than every token in the subset - carry under ``_MASS_TOLERANCE`` of the
        probability relative to the best valid token.
        """
        lc, cfg = self.lc, self.config
        logits = self._logits(idx)
        m = self.llm.n_vocab if ids is None else len(ids)
        cand = self._cand[:m]
        cand["id"] = self._all_ids if ids is None else ids
        cand["logit"] = logits if ids is None else logits[ids]
        cand["p"] = 0.0
        floor = float(cand["logit"].min())  # finite: a shortlist holds no banned token
        arr = lc.llama_token_data_array(self._cand_ptr, m, -1, False)
        lc.llama_sampler_apply(grammar, ctypes.byref(arr))
        valid = cand["logit"] != -np.inf
        count = int(np.count_nonzero(valid))
        if count == 0:
            return None
        if ids is not None and cfg.temperature > 0 and (cfg.top_k == 0 or count < cfg.top_k):
            missing = (cfg.top_k or self.llm.n_vocab) - count
            best = float(cand["logit"][valid].max())
            if missing * np.exp((floor - best) / cfg.temperature) > _MASS_TOLERANCE:
                return None
        lc.llama_sampler_apply(chain, ctypes.byref(arr))
        if arr.selected < 0:
            return None
        tok = int(arr.data[arr.selected].id)
        lc.llama_sampler_accept(chain, tok)
        return tok

    def _logits(self, idx: int) -> np.ndarray:
        """The logits of output ``idx``, a view of llama.cpp's buffer (rewritten per decode)."""
        return np.ctypeslib.as_array(self.lc.llama_get_logits_ith(self.llm.ctx, idx),
                                     shape=(self.llm.n_vocab,))

    def _shortlists(self, idx: int) -> list[np.ndarray]:
        """Ids of the most likely tokens, smallest shortlist first."""
        sizes = [k for k in _SHORTLISTS if k < self.llm.n_vocab - len(self._banned)]
        if not sizes:
            return []
        logits = self._logits(idx)
        widest = np.argpartition(logits, -sizes[-1])[-sizes[-1]:].astype(np.int32)
        out = []
        for k in sizes[:-1]:
            out.append(widest[np.argpartition(logits[widest], -k)[-k:]])
        return [*out, widest]

    def sample(self, chain: Any, grammar: Any | None, idx: int,
               bans: Sequence[int] = ()) -> int | None:
        """One token for output ``idx``: sample first, grammar-check, mask only on rejection.
        ``bans``: more tokens never sampled here (besides markup)."""
        lc = self.lc
        if len(self._banned):
            self._logits(idx)[self._banned] = -np.inf
        if bans:
            self._logits(idx)[list(bans)] = -np.inf
        tok = int(lc.llama_sampler_sample(chain, self.llm.ctx, idx))
        if grammar is None:
            return tok
        if not self.allows(grammar, tok):
            self.stats.rejections += 1
            got = None
            for ids in self._shortlists(idx):
                got = self._masked_draw(chain, grammar, idx, ids)
                if got is not None:
                    break
            if got is None:
                self.stats.full_masks += 1
                got = self._masked_draw(chain, grammar, idx, None)
            if got is None:
                return None
            tok = got
        lc.llama_sampler_accept(grammar, tok)
        return tok

    # --- the loop ---
    def run(self, next_request: Callable[[], Request | None],
            on_done: Callable[[Request, str, bool], None]) -> None:
        """Decode until ``next_request`` has nothing more and every sequence is idle.

        ``on_done(request, text, complete)`` is called as each request ends; ``complete`` is
        False when it hit ``max_tokens`` or the grammar reached a dead end.
        """
        slots: list[_Slot | None] = [None] * self.n_parallel
        for i in range(self.n_parallel):
            self.llm.remove_seq(i)
        try:
            while True:
                for i in range(self.n_parallel):
                    if slots[i] is None:
                        req = next_request()
                        if req is not None:
                            slots[i] = self._start(i, req)
                active = [s for s in slots if s is not None]
                if not active:
                    return
                outputs = self._step(active)
                for slot, idx in outputs:
                    done = self._advance(slot, idx)
                    if done is not None:
                        self._finish(slot)
                        slots[slot.seq] = None
                        on_done(slot.request, slot.out.decode("utf-8", "replace"), done)
        finally:
            for s in slots:
                if s is not None:
                    self._finish(s)

    def _start(self, seq: int, req: Request) -> _Slot:
        if not req.suffix:
            raise ValueError("a request needs at least one suffix token")
        pseq = self.llm.prefix_seq(req.prefix)
        n_prefix = len(self.llm.cached.get(pseq, []))
        self.llm.remove_seq(seq)
        if n_prefix:
            self.llm.copy_seq(pseq, seq, n_prefix)
        if req.constrained:
            self.lc.llama_sampler_reset(self._grammars[seq])
        self.stats.prompt_tokens += len(req.suffix)
        return _Slot(seq=seq, request=req, chain=self._new_chain(req.seed), pos=n_prefix,
                     pending=list(req.suffix))

    def _finish(self, slot: _Slot) -> None:
        if slot.chain is not None:
            self.lc.llama_sampler_free(slot.chain)
            slot.chain = None
        self.llm.remove_seq(slot.seq)

    def _step(self, active: list[_Slot]) -> list[tuple[_Slot, int]]:
        """Feed every active sequence's pending tokens (up to n_batch) in one decode."""
        items: list[tuple[int, int, int, bool]] = []
        outputs: list[tuple[_Slot, int]] = []
        room = self.llm.n_batch
        for s in active:
            if room == 0:
                break
            feed = s.pending[:room]
            for j, tok in enumerate(feed):
                last = j == len(s.pending) - 1
                items.append((tok, s.pos, s.seq, last))
                if last:
                    outputs.append((s, len(items) - 1))
                s.pos += 1
            s.pending = s.pending[len(feed):]
            room -= len(feed)
        self._fill(items)
        self._decode()
        return outputs

    def _advance(self, s: _Slot, idx: int) -> bool | None:
        """Sample the slot's next token; True/False when the request ends (complete or not)."""
        req = s.request
        grammar = self._grammars[s.seq] if req.constrained else None
        bans = copy_bans(s.tokens, req.avoid) if req.avoid and grammar is None else ()
        tok = self.sample(s.chain, grammar, idx, bans)
        if tok is None:
            return False
        s.n_out += 1
        s.tokens.append(tok)
        if req.constrained:
            self.stats.record_tokens += 1
        else:
            self.stats.context_tokens += 1
        if grammar is None and self.llm.is_eog(tok):
            return True
        piece = self.llm.piece(tok)
        cut = min((piece.index(b) for b in req.stop if b in piece), default=None)
        if cut is not None:
            s.out += piece[:cut]
            return True
        s.out += piece
        s.pending = [tok]
        if grammar is not None:
            if self.layout is not None:
                self._fast_forward(s, grammar)
            if s.out.endswith(b"}") and self.allows(grammar, self.llm.eos):
                return True
        if s.n_out >= req.max_tokens:
            return False
        return None

    def _fast_forward(self, s: _Slot, grammar: Any) -> None:
        """Append the text the grammar forces next; it is decoded with the sampled token."""
        assert self.layout is not None
        try:
            text = s.out.decode("utf-8")
        except UnicodeDecodeError:
            return  # in the middle of a character: nothing safe to force
        forced = self.layout.forced(text)
        if not forced:
            return
        for tok in self.llm.tokenize(forced):
            if not self.allows(grammar, tok):
                break
            self.lc.llama_sampler_accept(grammar, tok)
            s.out += self.llm.piece(tok)
            s.pending.append(tok)
            s.n_out += 1
            self.stats.forced_tokens += 1
