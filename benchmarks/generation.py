"""Generation throughput and validity on the default model, measured side by side.

    python -m benchmarks --only generation [--quick] [--set records=N] [--set repeats=R]
        [--set n_parallel=P]

Workload: demo-schema records for one class from a single-stage few-shot prompt (the same
prompt, model, threads and sampling settings for every path). The paths, interleaved per
repeat, medians reported:

- unconstrained: our batched decoder, no grammar, stops at the end of the line;
- constrained: the same decoder with our GBNF and our sampler order (sample first, check the
  one token, mask only on rejection); no fast-forward, so it does the same per-token work;
- constrained + fast-forward: also feeds grammar-forced text without sampling (what
  RecordGenerator runs by default); sampled and output (sampled + forced) tokens/s;
- naive: llama-cpp-python's ``Llama.create_completion`` with
  ``LlamaGrammar.from_json_schema`` (one sequence, grammar applied to the whole vocabulary),
  next to our decoder on one sequence, with and without our grammar.

Then a validity run: ``records`` records (default 300) over all classes with the default
two-stage RecordGenerator, each re-validated here against the record JSON Schema.
Issue target: constrained/unconstrained >= 0.8 and 100 % validity.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.suite import Benchmark, Result, markdown_table
from selpe_audit.demo.generator import generate_rows
from selpe_audit.llm.generation import (
    BatchEngine,
    GenerationConfig,
    GenerationStats,
    RecordGenerator,
    Request,
)
from selpe_audit.llm.grammar import (
    RecordLayout,
    max_record_chars,
    parse_record,
    record_gbnf,
)
from selpe_audit.llm.models import LLM
from selpe_audit.llm.prompts import single_stage_prompt
from selpe_audit.models import shared
from selpe_audit.schema import Schema, demo_schema_path, load_schema

CLASS = 3


def class_examples(schema: Schema, cls: Any, n_pos: int = 6,
                   n_neg: int = 3) -> tuple[list[dict], list[dict]]:
    """Fictional demo rows as few-shot positives (this class) and negatives (others)."""
    rows = [{f.name: r[f.name] for f in schema.record_fields} for r in generate_rows(400, seed=7)]
    pos = [r for r in rows if r[schema.label] == cls][:n_pos]
    neg = [r for r in rows if r[schema.label] != cls][:n_neg]
    return pos, neg


def decoder_run(llm: LLM, schema: Schema, cfg: GenerationConfig, prompt: list[int],
                n: int, constrained: bool, fast_forward: bool) -> tuple[GenerationStats, int]:
    """n single-stage requests on our decoder; stats and the number of valid records."""
    stats = GenerationStats()
    grammar = record_gbnf(schema, CLASS, leading_space=True) if constrained else None
    layout = RecordLayout(schema, CLASS) if fast_forward else None
    run_cfg = GenerationConfig(**{**cfg.__dict__, "fast_forward": fast_forward})
    decoder = BatchEngine(llm, run_cfg, grammar, cfg.n_parallel, stats, layout)
    cap = max_record_chars(schema) + 16
    left = list(range(n))
    valid = 0

    def next_request() -> Request | None:
        if not left:
            return None
        k = left.pop()
        return Request(prefix=0, suffix=prompt[-1:], seed=1000 + k, max_tokens=cap,
                       constrained=constrained, stop=b"" if constrained else b"\n")

    def on_done(req: Request, text: str, complete: bool) -> None:
        nonlocal valid
        stats.records += 1
        valid += parse_record(text, schema) is not None

    try:
        decoder.load_prefixes([prompt[:-1]])
        t0 = time.perf_counter()
        decoder.run(next_request, on_done)
        stats.seconds = time.perf_counter() - t0
    finally:
        decoder.close()
    if not constrained:
        stats.record_tokens, stats.context_tokens = stats.context_tokens, 0
    return stats, valid


def _naive_run(llama: Any, schema: Schema, cfg: GenerationConfig, prompt: str,
               n: int) -> tuple[float, int, int]:
    """tokens/s, tokens and valid records of ``n`` completions through the high-level API."""
    from llama_cpp import LlamaGrammar

    grammar = LlamaGrammar.from_json_schema(json.dumps(schema.record_json_schema()),
                                            verbose=False)
    tokens = valid = 0
    t0 = time.perf_counter()
    for k in range(n):
        out = llama.create_completion(prompt, grammar=grammar, max_tokens=max_record_chars(
            schema) + 16, temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
            min_p=0.0, seed=2000 + k)
        tokens += out["usage"]["completion_tokens"]
        valid += parse_record(out["choices"][0]["text"], schema) is not None
    return tokens / (time.perf_counter() - t0), tokens, valid


def _validity_run(llm: LLM, schema: Schema, cfg: GenerationConfig,
                  n: int) -> dict[str, Any]:
    """n records over all classes with the default two-stage generator, all re-validated."""
    gen = RecordGenerator(schema, llm, cfg)
    validator = schema.record_validator()
    classes = schema.classes
    per = [n // len(classes) + (i < n % len(classes)) for i in range(len(classes))]
    records: list[dict] = []
    t0 = time.perf_counter()
    for cls, k in zip(classes, per, strict=True):
        if k:
            pos, neg = class_examples(schema, cls)
            records += gen.generate(class_value=cls, positives=pos, negatives=neg, n=k)
            print(f"class {cls}: {k} records, {gen.last_stats.records_per_s:.2f} records/s",
                  file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    ok = sum(validator.is_valid(r) for r in records)
    st = gen.stats
    return {"records": len(records), "valid": ok,
            "validity_pct": 100.0 * ok / len(records) if records else 100.0,
            "records_per_s": len(records) / seconds, "seconds": seconds,
            "sampled_tokens_per_s": st.tokens_per_s,
            "output_tokens_per_s": (st.tokens + st.forced_tokens) / st.seconds,
            "rejection_rate": st.as_dict()["rejection_rate"], "full_masks": st.full_masks,
            "resampled": st.invalid, "attempts": st.attempts}


def run(quick: bool = False, records: int = 300, repeats: int = 5,
        n_parallel: int = 4, per_repeat: int = 8) -> dict[str, Any]:
    """Measure everything; print a table; return the numbers (for benchmarks/__main__.py)."""
    if quick:
        records, repeats, per_repeat = min(records, 2), 1, 2  # a record in two classes
    from llama_cpp import Llama

    load_before = os.getloadavg()[0]
    schema = load_schema(demo_schema_path())
    cfg = GenerationConfig(n_parallel=n_parallel, seed=0)
    llm = shared().llm(n_ctx=8192, n_seq=n_parallel)  # the process's: tests share it
    pos, neg = class_examples(schema, CLASS)
    prompt_text = single_stage_prompt(schema, class_value=CLASS, positives=pos, negatives=neg)
    prompt = llm.tokenize(prompt_text, bos=True)
    naive = Llama(model_path=llm.info.path, n_ctx=4096, n_threads=llm.n_threads,
                  n_threads_batch=llm.n_threads, swa_full=True, verbose=False, seed=0)
    naive_n = max(1, per_repeat // 4)
    if not quick:  # the smoke run times nothing it reports as a claim
        _naive_run(naive, schema, cfg, prompt_text, 1)  # evaluates and caches the prompt
        decoder_run(llm, schema, cfg, prompt, 1, False, False)  # warm-up

    one = GenerationConfig(n_parallel=1, seed=0)
    samples: dict[str, list[float]] = {k: [] for k in (
        "unconstrained", "constrained", "constrained_records", "ff_sampled", "ff_output",
        "ff_records", "naive", "unconstrained_1", "constrained_1")}
    counts = {"constrained_valid": 0, "constrained_n": 0, "naive_valid": 0, "naive_n": 0,
              "rejections": 0, "full_masks": 0, "sampled": 0}
    for _ in range(repeats):
        un, _ = decoder_run(llm, schema, cfg, prompt, per_repeat, False, False)
        co, ok = decoder_run(llm, schema, cfg, prompt, per_repeat, True, False)
        ff, ok_ff = decoder_run(llm, schema, cfg, prompt, per_repeat, True, True)
        tps, _, nv = _naive_run(naive, schema, cfg, prompt_text, naive_n)
        un1, _ = decoder_run(llm, schema, one, prompt, naive_n, False, False)
        co1, ok1 = decoder_run(llm, schema, one, prompt, naive_n, True, False)
        samples["unconstrained_1"].append(un1.tokens_per_s)
        samples["constrained_1"].append(co1.tokens_per_s)
        samples["constrained_records"].append(co.records_per_s)
        samples["unconstrained"].append(un.tokens_per_s)
        samples["constrained"].append(co.tokens_per_s)
        samples["ff_sampled"].append(ff.tokens_per_s)
        samples["ff_output"].append((ff.tokens + ff.forced_tokens) / ff.seconds)
        samples["ff_records"].append(ff.records_per_s)
        samples["naive"].append(tps)
        counts["constrained_valid"] += ok + ok_ff + ok1
        counts["constrained_n"] += co.records + ff.records + co1.records
        counts["naive_valid"] += nv
        counts["naive_n"] += naive_n
        counts["rejections"] += co.rejections + ff.rejections
        counts["full_masks"] += co.full_masks + ff.full_masks
        counts["sampled"] += co.record_tokens + ff.record_tokens
    del naive
    med = {k: statistics.median(v) for k, v in samples.items()}
    print("timed runs (medians, tokens/s): " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()),
          file=sys.stderr, flush=True)
    validity = _validity_run(llm, schema, cfg, records)
    result = {
        "model": llm.info.name, "model_sha256": llm.info.sha256, "n_threads": llm.n_threads,
        "n_parallel": n_parallel, "repeats": repeats, "records_per_repeat": per_repeat,
        "unconstrained_tokens_per_s": med["unconstrained"],
        "constrained_tokens_per_s": med["constrained"],
        "ratio": med["constrained"] / med["unconstrained"],
        "constrained_records_per_s": med["constrained_records"],
        "one_sequence_unconstrained_tokens_per_s": med["unconstrained_1"],
        "one_sequence_constrained_tokens_per_s": med["constrained_1"],
        "one_sequence_ratio": med["constrained_1"] / med["unconstrained_1"],
        "fast_forward_sampled_tokens_per_s": med["ff_sampled"],
        "fast_forward_output_tokens_per_s": med["ff_output"],
        "fast_forward_records_per_s": med["ff_records"],
        "naive_json_schema_tokens_per_s": med["naive"],
        "naive_ratio": med["naive"] / med["unconstrained_1"],
        "naive_validity_pct": 100.0 * counts["naive_valid"] / counts["naive_n"],
        "constrained_validity_pct": 100.0 * counts["constrained_valid"] / counts[
            "constrained_n"],
        "rejection_rate": counts["rejections"] / max(1, counts["sampled"]),
        "full_mask_rate": counts["full_masks"] / max(1, counts["sampled"]),
        "validity_run": validity,
        # Other processes on the machine slow llama.cpp's threads down a lot: report the load.
        "load_average": [load_before, os.getloadavg()[0]], "cpus": len(os.sched_getaffinity(0)),
    }
    _print(result)
    return result


def _print(r: dict[str, Any]) -> None:
    v = r["validity_run"]
    rows = [
        ("model", f"{r['model']} ({r['model_sha256'][:12]})"),
        ("threads / parallel sequences", f"{r['n_threads']} / {r['n_parallel']}"),
        ("load average before / after (CPUs)",
         f"{r['load_average'][0]:.1f} / {r['load_average'][1]:.1f} ({r['cpus']})"),
        ("unconstrained tokens/s", f"{r['unconstrained_tokens_per_s']:.1f}"),
        ("constrained tokens/s (our GBNF + sampler order)",
         f"{r['constrained_tokens_per_s']:.1f}"),
        ("ratio constrained / unconstrained", f"{r['ratio']:.2f}"),
        ("constrained records/s (single stage)", f"{r['constrained_records_per_s']:.2f}"),
        ("+ fast-forward: sampled tokens/s", f"{r['fast_forward_sampled_tokens_per_s']:.1f}"),
        ("+ fast-forward: output tokens/s", f"{r['fast_forward_output_tokens_per_s']:.1f}"),
        ("+ fast-forward: records/s (single stage)", f"{r['fast_forward_records_per_s']:.2f}"),
        ("1 sequence: unconstrained / constrained tokens/s",
         f"{r['one_sequence_unconstrained_tokens_per_s']:.1f} / "
         f"{r['one_sequence_constrained_tokens_per_s']:.1f} "
         f"({r['one_sequence_ratio']:.2f}x)"),
        ("1 sequence: naive from_json_schema tokens/s",
         f"{r['naive_json_schema_tokens_per_s']:.1f} ({r['naive_ratio']:.2f}x)"),
        ("naive validity", f"{r['naive_validity_pct']:.0f} %"),
        ("constrained validity (timed runs)", f"{r['constrained_validity_pct']:.0f} %"),
        ("rejected draws / full-vocabulary masks",
         f"{100 * r['rejection_rate']:.1f} % / {100 * r['full_mask_rate']:.2f} %"),
        (f"two-stage run: {v['records']} records", f"{v['records_per_s']:.2f} records/s, "
         f"{v['seconds']:.0f} s"),
        ("two-stage run validity", f"{v['validity_pct']:.1f} % ({v['valid']}/{v['records']}, "
         f"{v['resampled']} resampled)"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"medians over {r['repeats']} repeat(s) of {r['records_per_repeat']} records")
    for k, val in rows:
        print(f"  {k:<{width}}  {val}")


def _table(r: Result) -> str:
    return markdown_table(("", "unconstrained", "grammar-constrained", "ratio"), [
        ("tokens/s, 4 parallel", f"{r['unconstrained_tokens_per_s']:.1f}",
         f"{r['constrained_tokens_per_s']:.1f}", f"{r['ratio']:.2f}"),
        ("tokens/s, 1 sequence", f"{r['one_sequence_unconstrained_tokens_per_s']:.1f}",
         f"{r['one_sequence_constrained_tokens_per_s']:.1f}", f"{r['one_sequence_ratio']:.2f}"),
        ("naive JSON schema tokens/s", "", f"{r['naive_json_schema_tokens_per_s']:.1f}",
         f"{r['naive_ratio']:.2f}"),
        ("records/s (constrained / fast-forward)", "",
         f"{r['constrained_records_per_s']:.2f} / {r['fast_forward_records_per_s']:.2f}", ""),
        ("validity %", "", f"{r['constrained_validity_pct']:.0f}", "")])


def _summary(r: Result) -> str:
    return (f"{r['model']} on {r['cpus']} CPUs: grammar-constrained decoding runs at "
            f"{r['ratio']:.2f}x unconstrained speed, {r['constrained_validity_pct']:.0f} % "
            "valid records.")


BENCHMARK = Benchmark("generation", run, table=_table, summary=_summary)
