"""A free-text field's DP vocabulary: the phrases or keywords that many units write,
released with their noisy counts by OpenDP's partition selection (issue 31).

Short free text (a chief complaint, a product name) repeats: a few hundred phrasings cover
most rows, so the terms are whole texts ("phrases"). Longer text rarely repeats whole, so
its terms are the words and adjacent word pairs it uses ("keywords"). Which one a field gets
is decided from the schema alone (`term_kind`: its ``maxLength``), never from the rows.
OpenDP's polars front-end releases the keys of a group-by that are not given in advance:
each term's count gets integer noise and only terms whose noisy count clears OpenDP's
threshold are released, which is (epsilon, delta)-DP - delta bounds the chance that a term
few units hold gets through. A term one person writes in many rows counts once for that
person, so it is released only if enough other units write it too.

The pipeline, every step public except the rows:

1. `normalise` each text and cut it into terms (`terms`: public functions of the text);
2. one row per (unit, term); per unit, its first ``per_unit`` of those rows (OpenDP
   ``truncate_per_group`` twice; a row is its own unit under the row unit), so one unit
   changes at most ``per_unit`` counts by one each;
3. ``group_by(phrase).agg(dp.len())`` under one OpenDP Context at (epsilon, delta): OpenDP
   calibrates the noise and the threshold from its own privacy map;
4. drop the terms of the reviewer's denylist (`read_denylist`), then keep at most
   ``max_phrases``, largest noisy count first (post-processing).

The released phrases and counts are public: a reviewer sees each one in the artifact.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from release.dp.partition import (
    TERM_COL,
    UNIT_COL,
    make_partition_counts,
    release_partition_counts,
)
from release.dp.unit import PrivacyUnit, unit_codes
from selpe_audit.artifact.model_block import (
    DP_VOCABULARY,
    PhraseCount,
    PhraseInfo,
    TopicAnchor,
    Topics,
)
from selpe_audit.artifact.records import adapter, json_form
from selpe_audit.errors import UserError

CONSTRUCTOR = ("opendp.extras.polars: group_by(phrase).agg(dp.len()) with OpenDP's "
               "partition-selection threshold (keys not given in advance)")
#: what `normalise` does, in words (the artifact records it)
NORMALISATION = ("Unicode NFKC, lower case, every run of whitespace one space, punctuation "
                 "at either end removed")
_SPACE = re.compile(r"\s+")
_EDGE_PUNCTUATION = ".,;:!?\"'()[]{}-_/\\*#"
_WORD = re.compile(r"[^\W\d_][^\W\d_'-]*[^\W\d_]")  # letters (inner ' and -), 2+ long
#: a field whose maxLength is at most this holds phrases; longer text holds keywords
PHRASE_MAX_LENGTH = 64
TERM_KINDS = ("phrases", "keywords")
#: words too common to tell texts apart (public; English)
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "for", "from", "had", "has",
    "have", "he", "her", "his", "i", "in", "is", "it", "its", "me", "my", "no", "not", "of", "on",
    "or", "our", "she", "so", "than", "that", "the", "their", "them", "then", "there", "they",
    "this", "to", "was", "we", "were", "what", "when", "which", "who", "will", "with", "you",
    "your", "x", "since", "after", "before", "about", "into", "over", "very", "just",
    # function words that say nothing of a text's subject (pronouns, auxiliaries,
    # conjunctions, determiners, degree words)
    "if", "all", "while", "may", "can", "could", "would", "should", "might", "must", "shall",
    "do", "does", "did", "done", "doing", "being", "am", "most", "more", "less", "least",
    "too", "even", "though", "although", "only", "much", "many", "some", "any", "each",
    "every", "both", "either", "neither", "those", "these", "such", "own", "same", "other",
    "another", "out", "up", "down", "off", "again", "also", "yet", "still", "here", "where",
    "why", "how", "whom", "whose", "him", "us", "itself", "himself", "herself",
    "themselves", "ourselves", "yourself", "myself", "one's", "because", "until", "unless",
    "whether", "through", "during", "without", "within", "between", "among", "against",
    "upon", "onto", "rather", "quite", "almost", "enough", "ever", "never", "now",
    "re", "ve", "ll", "don", "doesn", "didn", "isn", "aren", "wasn", "weren", "can't",
    "don't", "doesn't", "didn't", "isn't", "it's", "there's",
})


def normalise(text: str | None) -> str:
    """The phrase a text counts for (public: a function of that text alone)."""
    if not text:
        return ""
    folded = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()
    return folded.strip(_EDGE_PUNCTUATION + " ")


def read_denylist(path: Path) -> tuple[frozenset[str], str]:
    """A reviewer's rejected phrases or keywords, one per line (normalised; blank lines and
    lines starting with # skipped), and the file's SHA-256 (the artifact records that and
    the count, never the lines: they are what the reviewer judged unfit to export)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read the phrase denylist ({e.strerror}); fix "
                        "counts.deny") from None
    lines = data.decode("utf-8", "replace").splitlines()
    terms_ = frozenset(normalise(x) for x in lines if x.strip() and not x.lstrip().startswith("#"))
    return terms_, hashlib.sha256(data).hexdigest()


class Terms(NamedTuple):
    """A free-text field's DP vocabulary settings: its kind (`term_kind`), the terms one unit
    counts for, and its topic columns (keywords only: a phrase is one column)."""

    kind: str = "phrases"
    per_unit: int = 1
    slots: int = 1


#: the default: one phrase per unit, one topic column
ONE_PHRASE = Terms()


def term_kind(max_length: int | None) -> str:
    """"phrases" for a field whose texts are at most `PHRASE_MAX_LENGTH` long (by the
    schema's maxLength), else "keywords" - from the schema, never from the rows."""
    return "phrases" if max_length is not None and max_length <= PHRASE_MAX_LENGTH \
        else "keywords"


def keywords(text: str | None) -> list[str]:
    """A text's keywords, in order: its words (letters only, not a stopword), then each
    adjacent pair of them. Public: a function of the text alone."""
    words = [w for w in _WORD.findall(normalise(text)) if w not in STOPWORDS]
    return list(dict.fromkeys([*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]))


def terms(text: str | None, kind: str) -> list[str]:
    """The terms a text counts for: its phrase, or its keywords."""
    if kind == "phrases":
        phrase = normalise(text)
        return [phrase] if phrase else []
    return keywords(text)


@dataclass(frozen=True)
class PhraseVocabulary:
    """One free-text field's released terms (public), largest noisy count first; topic
    j < len(phrases) is term j, topic len(phrases) is "other". A text's topic is its phrase
    (kind "phrases") or, of its keywords, the released one with the largest noisy count
    (kind "keywords"); a text with none released is "other".

    A keyword text has ``slots`` topics (model columns): its first, second, ... released
    keyword by noisy count, each skipped when its words are already in an earlier slot, and
    "other" (here: none) for the slots left over. One keyword says what a text is about;
    the next ones say more, and a decoder writes them together ("chest pain breath")."""

    field: str
    kind: str
    phrases: tuple[str, ...]
    dp_counts: tuple[int, ...]
    epsilon: float
    delta: float
    scale: float
    threshold: int
    mechanism: str
    per_unit: int
    denylist: dict[str, Any] | None = None  # the reviewer's denylist: SHA-256 and size
    slots: int = 1

    @property
    def k(self) -> int:
        """Topics: one per phrase and "other"."""
        return len(self.phrases) + 1

    def code(self, text: str | None) -> int:
        """The topic of a text (a function of it alone and the public vocabulary)."""
        return self.codes(text)[0]

    def codes(self, text: str | None) -> tuple[int, ...]:
        """The text's topic in each slot (a function of it alone and the vocabulary)."""
        other = len(self.phrases)
        out: list[int] = []
        words: set[str] = set()
        for j in sorted({self._index[t] for t in terms(text, self.kind) if t in self._index}):
            if len(out) == self.slots:
                break
            if not set(self.phrases[j].split()) <= words:
                out.append(j)
                words |= set(self.phrases[j].split())
        return (*out, *[other] * (self.slots - len(out)))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {p: j for j, p in enumerate(self.phrases)})

    @classmethod
    def from_record(cls, field: str, info: PhraseInfo) -> PhraseVocabulary:
        """A published vocabulary (the artifact's ``counts.topics[field].phrases``), so an
        audit gives a text the topic the release gave it."""
        return cls(field, info.kind, tuple(p.text for p in info.phrases),
                   tuple(p.dp_count for p in info.phrases), info.epsilon, info.delta,
                   info.scale, info.threshold, info.mechanism, info.per_unit, info.denylist,
                   info.slots)

    @classmethod
    def from_json(cls, field: str, obj: Any) -> PhraseVocabulary:
        return cls.from_record(field, adapter(PhraseInfo).validate_python(obj))

    def to_record(self) -> PhraseInfo:
        return PhraseInfo(self.kind, tuple(PhraseCount(p, c) for p, c in
                                           zip(self.phrases, self.dp_counts, strict=True)),
                          self.mechanism, self.epsilon, self.delta, self.scale, self.threshold,
                          self.per_unit, self.slots, self.k, NORMALISATION,
                          "every text with no released " + self.kind[:-1], CONSTRUCTOR,
                          self.denylist)

    def to_json(self) -> dict[str, Any]:
        return json_form(self.to_record())


def release_phrases(field: str, priv_texts: pl.Series, unit: PrivacyUnit,
                    unit_ids: pl.Series | None, epsilon: float, delta: float,
                    terms: Terms = ONE_PHRASE, max_phrases: int = 64,
                    deny: frozenset[str] = frozenset()) -> PhraseVocabulary:
    """The DP vocabulary of one field (see module). ``unit_ids``: each row's person id, of
    any type (person unit), else None (each row its own unit). Private in, public out."""
    kind, per_unit, slots = terms
    if not epsilon > 0 or not 0 < delta < 1:
        raise ValueError("phrases need epsilon > 0 and 0 < delta < 1")
    if min(per_unit, max_phrases, slots) < 1 or (kind == "phrases" and slots != 1):
        raise ValueError("per_unit, max_phrases and slots must be at least 1 (phrases: 1 slot)")
    if kind not in TERM_KINDS:
        raise ValueError(f"kind must be one of {', '.join(TERM_KINDS)}")
    frame = term_frame(priv_texts, unit, unit_ids, kind, per_unit)
    out = release_partition_counts(*make_partition_counts(frame, epsilon, delta, per_unit))
    released = (out.table  # then post-processing: the reviewer's denylist
                .filter(~pl.col(TERM_COL).is_in(sorted(deny)))
                .sort(["dp_count", TERM_COL], descending=[True, False]).head(max_phrases))
    if out.epsilon > epsilon * (1 + 1e-9) or out.delta > delta * (1 + 1e-9):
        raise RuntimeError("OpenDP accounting of the phrases exceeds their budget")
    return PhraseVocabulary(
        field=field, kind=kind, phrases=tuple(released[TERM_COL].to_list()),
        dp_counts=tuple(int(c) for c in released["dp_count"].to_list()),
        epsilon=out.epsilon, delta=out.delta, scale=out.scale, threshold=out.threshold,
        mechanism=out.mechanism, per_unit=per_unit, slots=slots)


def term_frame(priv_texts: pl.Series, unit: PrivacyUnit, unit_ids: pl.Series | None,
               kind: str, per_unit: int | None = None) -> pl.LazyFrame:
    """One row per (unit, term) occurrence, rows in input order (private); each distinct
    text cut into terms once. With ``per_unit``, only the rows OpenDP's bounding keeps
    (`release.dp.partition.make_partition_counts`: a unit's distinct terms, its first
    ``per_unit``), grouped by unit (each unit's in input order) - a function of each unit's
    own rows, so the privacy map is unchanged, and a million texts' ten million term rows
    never reach OpenDP.

    A unit is a u32 code (`unit_codes`; a row alone: its index). The rows are bounded on
    integer codes of the terms, and only the kept rows get their term's text (views into
    one copy of each distinct term): 10^7 rows take hundreds of MB, not gigabytes."""
    person = unit.id_field is not None
    if person and unit_ids is None:
        raise ValueError("the person unit needs each row's person id")
    units = (unit_codes(unit_ids) if person and unit_ids is not None
             else pl.int_range(len(priv_texts), eager=True, dtype=pl.UInt32))
    texts = priv_texts.cast(pl.String)
    distinct = texts.drop_nulls().unique()
    owner: list[int] = []  # (distinct text, term) rows, built flat: a polars list column
    term_ids: list[int] = []  # made from Python lists costs ~25 us a text
    vocabulary: dict[str, int] = {}
    for j, text in enumerate(distinct.to_list()):
        got = terms(text, kind)
        if per_unit is not None:  # a unit's first per_unit distinct terms lie among its
            got = list(dict.fromkeys(got))[:per_unit]  # texts' own first per_unit ones
        owner += [j] * len(got)
        term_ids += [vocabulary.setdefault(t, len(vocabulary)) for t in got]
    cut = pl.DataFrame({"__text": distinct.gather(owner),
                        "__term": pl.Series(term_ids, dtype=pl.UInt32)})
    frame = (pl.DataFrame({UNIT_COL: units, "__text": texts})  # the small side: the cut
             .join(cut, on="__text", how="inner", maintain_order="left_right")
             .select(UNIT_COL, "__term"))
    if per_unit is not None:  # a unit's distinct terms in row order, its first per_unit:
        # sorted by unit (stably), a row's place in its unit is its index less the unit's
        # first index (polars' unique and over() cost 10x the memory and time at 10^6 rows)
        pair = pl.col(UNIT_COL).cast(pl.UInt64) * (1 << 32) + pl.col("__term")
        place = (pl.int_range(pl.len(), dtype=pl.UInt32)
                 - pl.col(UNIT_COL).search_sorted(pl.col(UNIT_COL), side="left")
                 .cast(pl.UInt32))
        frame = (frame.filter(pair.is_first_distinct()).sort(UNIT_COL, maintain_order=True)
                 .filter(place < per_unit))
    phrases = pl.Series(TERM_COL, list(vocabulary), dtype=pl.String)
    return pl.DataFrame([frame[UNIT_COL], phrases.gather(frame["__term"])]).lazy()


#: the artifact's ``counts.topics[field].source`` of a phrase vocabulary
SOURCE = DP_VOCABULARY
#: the anchor text of the "other" topic (not a text any record is given)
OTHER = "(other)"


def phrase_topics(v: PhraseVocabulary) -> Topics:
    """The artifact's ``counts.topics[field]`` block: topic j is phrase j (its one member);
    the last topic, "other", lists every released phrase as its members, so a decoder
    without a text model gives an "other" row a released phrase drawn the same way in every
    class (no label signal the release does not carry)."""
    anchors = [TopicAnchor(p, (p,)) for p in v.phrases]
    anchors.append(TopicAnchor(OTHER, tuple(v.phrases), other=True))
    return Topics(v.k, SOURCE, tuple(anchors), texts_considered=len(v.phrases),
                  phrases=v.to_record())
