"""The DP phrase vocabulary (issue 31 item 1): OpenDP's partition selection over normalised
texts; a phrase one person holds never comes out, a phrase many hold does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import ROOT, with_settings

from decode.decoders.model import ModelDecoder
from decode.pipeline import DecodeSettings, run_decode
from decode.released import released_view
from release.config_file import load_config
from release.dp.unit import PrivacyUnit
from release.phrases import PhraseVocabulary, Terms, normalise, release_phrases
from release.pipeline import run_release
from selpe_audit.artifact.document import read_release
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import demo_schema_path

CANARY = "CANARY-7f3a held by one person"
COMMON = ["Chest pain", "chest  pain.", "FEVER", "cough", "Headache!"]


def _rows(n: int, canary_rows: int) -> tuple[list[str], list[str]]:
    texts = [COMMON[i % len(COMMON)] for i in range(n)] + [CANARY] * canary_rows
    ids = [f"p{i % (n // 4)}" for i in range(n)] + ["canary-person"] * canary_rows
    return texts, ids


def test_normalise_is_public_and_per_text():
    assert normalise("  Chest   PAIN. ") == normalise("chest pain") == "chest pain"
    assert normalise("(fever)") == "fever" and normalise("") == normalise(None) == ""
    assert normalise("ＦＥＶＥＲ") == "fever"  # NFKC: full-width letters fold
    assert normalise("pain - left arm") == "pain - left arm"  # inner punctuation stays


def test_a_phrase_one_person_holds_in_many_rows_is_never_released():
    """The canary person writes the canary in 30 rows (more than the bound of 10): counted
    once, it stays under OpenDP's threshold; the common phrases (hundreds of people) come
    out, each once after normalisation, with noisy counts near the truth."""
    texts, ids = _rows(2_000, canary_rows=30)
    for _ in range(5):  # the noise is never seeded: five draws
        v = release_phrases("chief_complaint", pl.Series(texts), PrivacyUnit("pid", 10),
                            pl.Series(ids), epsilon=1.0, delta=1e-6, terms=Terms(per_unit=2))
        assert normalise(CANARY) not in v.phrases and CANARY not in str(v.to_json())
        assert set(v.phrases) == {"chest pain", "fever", "cough", "headache"}
        assert v.threshold > 1 and v.scale == pytest.approx(2.0)  # 2 phrases per person
        assert v.epsilon <= 1.0 + 1e-9 and 0 < v.delta <= 1e-6
        assert list(v.dp_counts) == sorted(v.dp_counts, reverse=True)


def test_row_unit_counts_rows_and_codes_every_text():
    texts, _ = _rows(1_000, canary_rows=1)
    v = release_phrases("chief_complaint", pl.Series(texts), PrivacyUnit(), None,
                        epsilon=1.0, delta=1e-6)
    assert v.per_unit == 1 and v.scale == pytest.approx(1.0)
    chest = v.phrases.index("chest pain")
    assert abs(v.dp_counts[chest] - 400) < 40  # 2 of 5 spellings, Laplace scale 1
    assert v.code("CHEST PAIN") == chest and v.code(CANARY) == v.k - 1 == len(v.phrases)
    assert v.code(None) == v.k - 1
    doc = v.to_json()
    assert doc["k"] == v.k and doc["phrases"][0]["text"] == v.phrases[0]


def test_a_person_counts_once_per_phrase_and_for_at_most_per_unit_phrases():
    """200 people each write "fever" in 10 rows and "cough" once: a count is of people,
    not rows (about 200, not 2,000); with per_unit 1 each person counts for one of the two
    (the counts add up to about 200, not 400); OpenDP's noise grows with the phrases a
    person may count for (its l1 sensitivity): scale per_unit / epsilon."""
    texts = (["fever"] * 10 + ["cough"]) * 200
    ids = [f"p{i // 11}" for i in range(len(texts))]
    for per_unit in (1, 3):
        v = release_phrases("cc", pl.Series(texts), PrivacyUnit("pid", 20), pl.Series(ids),
                            epsilon=1.0, delta=1e-6, terms=Terms(per_unit=per_unit))
        assert v.scale == pytest.approx(per_unit) and v.per_unit == per_unit
        counts = dict(zip(v.phrases, v.dp_counts, strict=True))
        assert counts.get("fever", 0) < 240  # people, not rows
        if per_unit == 1:  # one of each person's two phrases, at random
            assert sum(counts.values()) == pytest.approx(200, abs=60)
        else:
            assert abs(counts["cough"] - 200) < 40


def test_at_most_max_phrases_largest_first():
    texts = [f"phrase {i % 6}" for i in range(3_000)]
    v = release_phrases("cc", pl.Series(texts), PrivacyUnit(), None, epsilon=1.0,
                        delta=1e-6, max_phrases=3)
    assert len(v.phrases) == 3 and v.k == 4


def test_a_keyword_text_fills_its_slots_by_noisy_count_skipping_covered_words():
    """Slot s is the text's s-th released keyword by noisy count; a pair whose words an
    earlier slot holds is skipped; slots left over (and every slot of a text with no
    released keyword) are "other"."""
    v = PhraseVocabulary("cc", "keywords", ("pain", "chest", "chest pain", "breath", "cough"),
                         (90, 80, 70, 60, 50), 1.0, 1e-6, 2.0, 30, "laplace", 2, slots=3)
    other = v.k - 1
    assert v.codes("Chest pain and shortness of breath") == (0, 1, 3)
    assert v.codes("breath") == (3, other, other) and v.code("breath") == 3
    assert v.codes("a rash") == (other,) * 3 == v.codes(None)
    assert v.to_json()["slots"] == 3
    back = PhraseVocabulary.from_json("cc", v.to_json())  # what an audit reads back
    assert back == v and back.codes("Chest pain and shortness of breath") == (0, 1, 3)


def test_only_a_dp_vocabulary_has_an_other_topic_and_it_is_never_a_text():
    """A DP vocabulary's last topic is "other" (no text is released for it); every topic of
    a codebook of public anchors is a text."""
    from release.phrases import OTHER, phrase_topics
    from selpe_audit.artifact.model_block import TopicAnchor, Topics
    from selpe_audit.artifact.sampling import topic_text
    from selpe_audit.schema import load_schema

    f = load_schema(demo_schema_path()).field("chief_complaint")
    v = PhraseVocabulary("cc", "phrases", ("chest pain", "fever"), (90, 80), 1.0, 1e-6, 2.0,
                         30, "laplace", 1)
    vocab = phrase_topics(v)
    assert vocab.other == 2 and vocab.anchors[vocab.other].text == OTHER
    assert [a.text for a in vocab.released] == ["chest pain", "fever"]
    assert [topic_text(vocab, j, f) for j in range(3)] == ["chest pain", "fever", None]
    public = Topics(2, "public pool", (TopicAnchor("chest pain", ("chest pain",)),
                                       TopicAnchor("fever", ("fever",))))
    assert public.other is None and public.released == public.anchors
    assert topic_text(public, 1, f) == "fever"


@pytest.mark.parametrize("kw", [{"epsilon": 0.0}, {"delta": 0.0},
                                {"terms": Terms(per_unit=0)}])
def test_bad_settings_are_refused(kw):
    args = {"epsilon": 1.0, "delta": 1e-6} | kw
    with pytest.raises(ValueError):
        release_phrases("cc", pl.Series(["a"]), PrivacyUnit(), None, **args)


# ----- through the release: the default model path on a larger demo table -----------------

CANARY_WORD = "zorblaxitis"  # one person's word, in several of that person's rows


def _phrase_release(tmp: Path, key: Path) -> dict:
    """A `fixed` release (counts only, the vocabulary on) of 2,500 demo rows: one person
    writes the canary word in 6 rows; 600 other people write "chest pain since morning"."""
    rows = generate_rows(2_500, seed=41)
    for i, r in enumerate(rows[:600]):
        r.update(patient_id=f"CP{i:05d}", chief_complaint="chest pain since morning")
    for r in rows[600:606]:
        r.update(patient_id="CANARY-PERSON", chief_complaint=f"{CANARY_WORD} of the left knee")
    data = tmp / "rows.csv"
    pl.DataFrame(rows).write_csv(data)
    base = load_config(ROOT / "examples" / "release.toml", {
        "release_key": key, "out": tmp / "out", "lifetime_ledger": tmp / "ledger",
        "schema": demo_schema_path(), "enclave_log": tmp / "enclave.log"})
    cfg = with_settings(base, data=data, counts_mode="fixed", cohorts=(), rates=(),
                        keyword_slots=3,  # the several-slot path (the default is 1)
                        phrases=True)  # at 2,500 rows the plan ("auto") would skip it
    return {"cfg": cfg, "doc": run_release(cfg).doc}


@pytest.fixture(scope="module")
def phrase_release(tmp_path_factory, keys):
    return _phrase_release(tmp_path_factory.mktemp("phrases"), keys[0][0])


@pytest.mark.slow
def test_the_default_model_path_releases_a_keyword_vocabulary(phrase_release):
    doc, cfg = phrase_release["doc"], phrase_release["cfg"]
    topics = doc["counts"]["topics"]["chief_complaint"]
    vocab = topics["phrases"]
    assert topics["source"] == "dp phrases" and vocab["kind"] == "keywords"  # maxLength 120
    assert "chest" in [p["text"] for p in vocab["phrases"]]  # 600 people lead with it
    assert topics["anchors"][-1]["text"] == "(other)" and topics["k"] == len(vocab["phrases"]) + 1
    assert len(topics["dp_counts_by_class"]) == 5
    (entry,) = [e for e in doc["ledger"]["entries"] if e["id"].startswith("counts/keywords/")]
    share = cfg.budget.counts_epsilon * cfg.counts.phrase_share
    assert entry["epsilon"] == pytest.approx(share) and 0 < entry["delta"] <= cfg.counts_delta / 2
    assert doc["ledger"]["total_epsilon"] <= cfg.budget.epsilon * (1 + 1e-9)
    assert doc["ledger"]["total_delta"] <= cfg.release_delta * (1 + 1e-9)
    assert doc["budget"]["counts"]["phrase_share"] == cfg.counts.phrase_share
    assert doc["budget"]["counts"]["topic_share"] == cfg.counts.topic_share == 0.3
    model_cols = [c["name"] for c in doc["counts"]["model"]["columns"]]
    assert vocab["slots"] == cfg.counts.keyword_slots == 3
    assert {"topic:chief_complaint", "topic:chief_complaint#2",
            "topic:chief_complaint#3"} <= set(model_cols)


@pytest.mark.slow
def test_the_model_decoder_writes_a_keyword_records_slots_together(phrase_release, keys):
    """A keyword record's text is its slots' released keywords (several in some records),
    never a word the vocabulary lacks; the LLM is shown that text as the record's topic."""
    released = released_view(read_release(phrase_release["cfg"].out, [keys[0][1]]))
    decoder = ModelDecoder(released, seed=5)
    words = {w for a in released.topics["chief_complaint"].anchors[:-1] for w in a.text.split()}
    lengths = []
    for i in range(300):
        rec, topics = decoder.draw(1, i)
        text = rec["chief_complaint"]
        assert set(text.split()) <= words, text
        lengths.append(len(text.split()))
        if topics["chief_complaint"] != released.topics["chief_complaint"].k - 1:
            assert decoder.topic_hints("chief_complaint", topics["chief_complaint"],
                                       text) == [text]
    assert max(lengths) >= 2 and min(lengths) == 1


@pytest.mark.model
def test_a_word_one_person_holds_reaches_no_output(phrase_release, tmp_path, keys):
    """The canary word (one person, six rows) is in no file the release writes (artifact,
    signatures, review page) and in no decoded record."""
    cfg = phrase_release["cfg"]
    out = tmp_path / "synthetic.csv"
    run_decode(cfg.out, [keys[0][1]], 0, out, DecodeSettings(n=300, decoder="model"))
    files = [p for p in cfg.out.rglob("*") if p.is_file()] + [out]
    assert len(files) >= 3
    for p in files:
        assert CANARY_WORD not in p.read_text(errors="replace").lower(), p
    texts = pl.read_csv(out)["chief_complaint"].to_list()
    assert any("chest" in t for t in texts)


@pytest.mark.slow
def test_the_model_decoder_draws_other_topic_texts_alike_in_every_class(phrase_release, keys):
    """Issue 31 item 3: a record of topic "other" gets a released term drawn the same way
    whatever its class (chi-square homogeneity across classes; a false failure has
    probability 1e-4)."""
    from scipy.stats import chi2_contingency

    released = released_view(read_release(phrase_release["cfg"].out, [keys[0][1]]))
    decoder = ModelDecoder(released, seed=3)
    other = released.topics["chief_complaint"].k - 1
    by_class: dict = {}
    for c in released.classes:
        for i in range(1_500):
            rec, topics = decoder.draw(c, i)
            if topics.get("chief_complaint") == other:
                by_class.setdefault(c, []).append(rec["chief_complaint"])
    texts = sorted({t for ts in by_class.values() for t in ts})
    table = [[ts.count(t) for t in texts] for ts in by_class.values() if len(ts) >= 50]
    assert len(table) >= 2 and len(texts) >= 2
    assert chi2_contingency(table).pvalue > 1e-4


def _marginals_texts(released, seed: int, n: int = 400) -> dict:
    from decode.decoders.marginals import MarginalsDecoder

    decoder = MarginalsDecoder(released, seed=seed)
    return decoder, {c: [decoder.record(c, i)["chief_complaint"] for i in range(n)]
                     for c in released.classes}


def test_the_marginals_decoder_copies_released_terms_alike_in_every_class(phrase_release,
                                                                          keys):
    """Without a text model (here: the topic x class counts taken out of a counts-only
    artifact, which has no exemplars) the marginals decoder's text is a released term, drawn
    the same way in every class (chi-square homogeneity; false failure 1e-4)."""
    import dataclasses

    from scipy.stats import chi2_contingency

    rel = read_release(phrase_release["cfg"].out, [keys[0][1]])
    topics = rel.view.counts.topics
    topics["chief_complaint"] = dataclasses.replace(topics["chief_complaint"],
                                                    dp_counts_by_class=())
    released = released_view(rel)
    decoder, by_class = _marginals_texts(released, seed=4)
    terms = set(released.topics["chief_complaint"].anchors[-1].members)
    assert set().union(*by_class.values()) <= terms
    assert decoder.describe()["text_source"] == {"chief_complaint": "dp phrases"}
    texts = sorted(terms)
    assert chi2_contingency([[ts.count(t) for t in texts] for ts in by_class.values()]
                            ).pvalue > 1e-4


def test_the_marginals_decoder_draws_a_topic_from_its_released_counts_by_class(
        phrase_release, keys):
    """With the topic x class counts released (a model-mode artifact) the text is the text's
    class-conditional marginal, like any field's: a topic's keyword with its clamped noisy
    count's share of the class, "other" a released term drawn alike in every class
    (chi-square goodness of fit per class; false failure 1e-4 each)."""
    from scipy.stats import chisquare

    from selpe_audit.artifact.sampling import shares

    released = released_view(read_release(phrase_release["cfg"].out, [keys[0][1]]))
    vocab = released.topics["chief_complaint"]
    decoder, by_class = _marginals_texts(released, seed=6, n=1_000)
    assert decoder.describe()["text_source"] == {
        "chief_complaint": "dp topics x class, other: dp phrases"}
    words = [a.text for a in vocab.anchors[:-1]]
    for k, (c, texts) in enumerate(by_class.items()):
        p = shares(vocab.by_class[k][:len(vocab.anchors)])
        expected = p[:-1] + p[-1] / len(words)  # "other": a released term, uniformly
        observed = [texts.count(w) for w in words]
        assert sum(observed) == len(texts)
        keep = expected * len(texts) >= 5  # cells the test can judge; the rest pooled
        obs = [*np.array(observed)[keep], np.array(observed)[~keep].sum()]
        exp = [*(expected * len(texts))[keep], (expected * len(texts))[~keep].sum()]
        if exp[-1] == 0:
            obs, exp = obs[:-1], exp[:-1]
        assert chisquare(obs, exp).pvalue > 1e-4, c


def test_review_flags_a_released_term_that_looks_like_personal_data():
    """The reviewer sees a warning on a released term holding a long number (an id?), and
    none on plain words; "other" is not a text and is never flagged."""
    from release.phrases import phrase_topics
    from selpe_audit.artifact.records import json_form
    from selpe_audit.review.view import review_warnings

    vocab = PhraseVocabulary("chief_complaint", "phrases", ("fever", "bed 40417"), (30, 20),
                             1.0, 1e-6, 1.0, 14, "Laplace", 1)
    topics = json_form(phrase_topics(vocab))
    warnings = [w for w in review_warnings({"counts": {"topics": {"chief_complaint": topics}}})
                if w.kind == "personal data"]
    assert len(warnings) == 1 and "40417" in warnings[0].reason
    assert "phrases 1" in warnings[0].where


@pytest.mark.slow
@pytest.mark.audit
@pytest.mark.parametrize("kind", ["phrases", "keywords"])
def test_the_phrase_release_passes_the_mechanism_audit_and_a_factor_ten_is_caught(kind):
    """`audit mechanism --kind phrases|keywords`: the release's measurement at epsilon 1 on
    D and D' = D + one row writing the audited text (keywords: two terms, two per unit).
    Correct: eps_LB within the claim at confidence 1 - 1e-4 (a false failure at most about
    1e-4; phrases 0.54 seen at 300 + 300 runs). Calibrated to 10x the claim: eps_LB far
    above 1 at the default confidence (phrases near 4.4)."""
    from audits import mechanism

    good = mechanism.audit(mechanism.phrase_neighbours(1.0, 1e-6, kind=kind), runs=300,
                           calibration_runs=300, confidence=1 - 1e-4)
    assert good["passed"] and good["eps_lb"] <= 1.0
    assert good["details"]["threshold"] > 1
    bad = mechanism.audit(mechanism.phrase_neighbours(1.0, 1e-6, calibrate_to=10.0,
                                                      kind=kind),
                          runs=300, calibration_runs=300)
    assert not bad["passed"] and bad["eps_lb"] > 2.0


@pytest.mark.parametrize(("kind", "per_unit"), [("keywords", 2), ("keywords", 3), ("phrases", 1)])
def test_the_term_frame_bounded_before_opendp_keeps_what_its_truncation_keeps(kind, per_unit):
    """Bounding the term frame per unit before OpenDP (each text's first per_unit distinct
    terms, then each unit's first per_unit distinct ones) keeps exactly the (unit, term)
    rows OpenDP's two truncate_per_group steps keep from the unbounded frame."""
    from release.dp.partition import TERM_COL, UNIT_COL
    from release.phrases import term_frame

    rows = generate_rows(600, seed=5)
    texts = pl.Series([r["chief_complaint"] for r in rows])
    ids = pl.Series([f"u{i % 97}" for i in range(len(rows))])  # ~6 texts per unit
    unit = PrivacyUnit("__unit", 10)
    full = term_frame(texts, unit, ids, kind).collect()
    expected: dict[str, list[str]] = {}
    for u, t in full.iter_rows():
        kept = expected.setdefault(u, [])
        if t not in kept and len(kept) < per_unit:
            kept.append(t)
    bounded = term_frame(texts, unit, ids, kind, per_unit).collect()
    got: dict[str, list[str]] = {}
    for u, t in bounded.select(UNIT_COL, TERM_COL).iter_rows():
        got.setdefault(u, []).append(t)
    assert got == expected and bounded.height < full.height
