"""Dataset schemas: a JSON Schema (draft 2020-12) object with a few keywords of ours.

Every field is one of
- numeric: ``"type": "integer" | "number"`` with ``minimum`` and ``maximum``; public histogram
  bins in ``x-bins`` (edges, first = minimum, last = maximum; bins are [e_i, e_i+1) and the
  last one is closed); numbers carry ``x-precision`` (decimal places, default 2);
- categorical: an ``enum`` of strings or integers;
- free text: ``"type": "string"`` with ``maxLength`` (``minLength`` optional).

The top level names the label (``x-label``, a categorical field) and optionally the person-id
field (``x-id``), which is never part of a synthetic record. Field order is the order of
``properties`` (kept as ``x-field-order`` when the schema is written canonically, because
canonical JSON sorts keys). Everything here is public: the schema never holds private data.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import fastjsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from selpe_audit.artifact.canonical import canonical_bytes
from selpe_audit.errors import UserError
from selpe_audit.person_schema import KEYWORDS as PERSON_KEYWORDS
from selpe_audit.person_schema import PersonStructure, parse_persons

if TYPE_CHECKING:
    import polars as pl

Kind = Literal["numeric", "categorical", "text", "id"]

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_PRECISION = 2
DEFAULT_BIN_COUNT = 10
_OUR_TOP_KEYWORDS = {"x-label", "x-id", "x-field-order", "x-linkage", *PERSON_KEYWORDS}
_ALLOWED_TOP = {
    "$schema", "$id", "title", "description", "type", "properties", "required",
    "additionalProperties", *_OUR_TOP_KEYWORDS,
}
_ALLOWED_FIELD = {
    "type", "enum", "minimum", "maximum", "minLength", "maxLength", "description", "title",
    "x-bins", "x-precision", "examples", "x-gap-bins",
}
MAX_EXAMPLES = 100  # public example texts of one free-text field


@dataclass(frozen=True)
class Field:
    """One field of the schema, classified; all values public."""

    name: str
    kind: Kind
    json_type: str
    description: str
    enum: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    bins: tuple[float, ...] = ()
    precision: int = 0
    min_length: int = 0
    max_length: int = 0
    examples: tuple[str, ...] = ()  # free text: the schema's public example values

    @property
    def is_integer(self) -> bool:
        return self.json_type == "integer"

    def bin_labels(self, edges: Sequence[float] | None = None) -> list[str]:
        """Public names of the histogram bins, e.g. ``[60, 80)`` and a closed last bin;
        ``edges``: bins other than the public ones (public bins merged by the release)."""
        return bin_labels(self.bins if edges is None else edges)

    def bin_index(self, value: float) -> int:
        """Index of the public bin that holds ``value`` (which lies in [minimum, maximum])."""
        return bin_index(self.bins, value)


def bin_labels(edges: Sequence[float]) -> list[str]:
    """Names of the bins between ``edges``: ``[a, b)``, the last one closed."""
    names = [_fmt(e) for e in edges]
    labels = [f"[{a}, {b})" for a, b in itertools.pairwise(names)]
    labels[-1] = labels[-1][:-1] + "]"
    return labels


def bin_index(edges: Sequence[float], value: float) -> int:
    """Index of the bin between ``edges`` that holds ``value`` (the last one closed)."""
    for i in range(len(edges) - 2):
        if value < edges[i + 1]:
            return i
    return len(edges) - 2


@dataclass(frozen=True)
class Schema:
    """A loaded, checked dataset schema."""

    raw: dict[str, Any]
    name: str
    fields: tuple[Field, ...]
    label: str
    id_field: str | None
    #: fields that identify a person across extracts (``x-linkage``): the lifetime ledger
    #: matches people by their keyed hash (`release.ledger_people`)
    linkage_fields: tuple[str, ...] = ()
    #: which field orders a person's records and which are the person's
    #: (`selpe_audit.person_schema`); None: records are released as independent visits
    persons: PersonStructure | None = None
    #: records carry the person id (decoded people); otherwise it is never in a record
    ids_in_records: bool = False

    # ----- structure -------------------------------------------------------------------
    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise UserError(f"schema '{self.name}' has no field '{name}'")

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def record_fields(self) -> tuple[Field, ...]:
        """Fields of a synthetic record: everything but the person id (unless
        `with_person_ids`)."""
        return tuple(f for f in self.fields if f.kind != "id" or self.ids_in_records)

    def with_person_ids(self) -> Schema:
        """This schema for records of synthetic people, which carry their (fresh) id."""
        return replace(self, ids_in_records=True)

    @property
    def label_field(self) -> Field:
        return self.field(self.label)

    @property
    def classes(self) -> list[Any]:
        return list(self.label_field.enum)

    def by_kind(self, kind: Kind) -> list[Field]:
        return [f for f in self.record_fields if f.kind == kind]

    # ----- JSON forms ------------------------------------------------------------------
    def public_json(self) -> dict[str, Any]:
        """The schema as stored in the artifact: raw schema plus an explicit field order."""
        out = dict(self.raw)
        out["x-field-order"] = self.field_names
        return out

    def sha256(self) -> str:
        return hashlib.sha256(canonical_bytes(self.public_json())).hexdigest()

    def record_json_schema(self) -> dict[str, Any]:
        """JSON Schema a synthetic record must satisfy (the person id removed)."""
        props = {f.name: self.raw["properties"][f.name] for f in self.record_fields}
        return {
            "$schema": DRAFT_2020_12,
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
        }

    def row_validator(self) -> Draft202012Validator:
        return Draft202012Validator(self.raw)

    def record_validator(self) -> Draft202012Validator:
        return Draft202012Validator(self.record_json_schema())

    def record_check(self) -> Callable[[Any], bool]:
        """``record_validator().is_valid``, about 7x faster: fastjsonschema compiles the same
        record schema (its keywords mean the same in its draft 7) to Python, for the decode's
        millions of records; `tests/test_schema.py` checks the two agree on edge values.
        A check only: ``use_default=False`` (a schema refuses ``default`` today anyway)."""
        validate = fastjsonschema.compile(self.record_json_schema(), use_default=False)

        def is_valid(record: Any) -> bool:
            try:
                validate(record)
            except fastjsonschema.JsonSchemaException:
                return False
            return True

        return is_valid

    # ----- lexicalization --------------------------------------------------------------
    def lexicalize(self, name: str, value: Any) -> str:
        """l(c, v): one field's value as text, e.g. ``heart rate in beats per minute: 88``."""
        f = self.field(name)
        return f"{f.description}: {format_value(f, value)}"

    def linearize(self, record: dict[str, Any]) -> str:
        """The canonical text of a record: l(c, v) for every record field, in schema order."""
        return "; ".join(self.lexicalize(f.name, record[f.name]) for f in self.record_fields)


def format_value(f: Field, value: Any) -> str:
    if f.kind == "numeric" and not f.is_integer:
        return f"{float(value):.{f.precision}f}"
    return str(value)


# ----- cohorts: the one membership predicate ----------------------------------------------

@dataclass(frozen=True)
class CohortRule:
    """A cohort's public rule, a box over the schema's domain: every numeric field named lies
    in its closed range [low, high], every categorical field is one of its values.

    The release counts rows by it (`condition`, vectorised), decode assigns records by it
    (`contains`) and the config refuses overlapping cohorts by it (`overlaps`): one rule,
    so the three readings cannot drift apart.
    """

    conditions: tuple[tuple[Field, tuple[Any, ...]], ...]  # (field, (low, high) or values)

    @classmethod
    def parse(cls, schema: Schema, where: Mapping[str, Any]) -> CohortRule:
        """Check a ``where`` table against the schema; a problem is a one-line ValueError."""
        conds = []
        for name, rule in where.items():
            if name not in schema.field_names:
                raise ValueError(f"unknown field '{name}'")
            f = schema.field(name)
            rule = tuple(rule) if isinstance(rule, list | tuple) else ()
            if f.kind == "numeric":
                if (len(rule) != 2 or not all(isinstance(x, int | float) for x in rule)
                        or rule[0] > rule[1]):
                    raise ValueError(f"'{name}' needs a range [low, high]")
            elif f.kind == "categorical":
                if not rule or not set(rule) <= set(f.enum):
                    raise ValueError(f"'{name}' must list values from its enum")
            else:
                raise ValueError(f"'{name}' is free text or an id; cohorts use numeric or "
                                 "categorical fields")
            conds.append((f, rule))
        return cls(tuple(conds))

    def where_json(self) -> dict[str, list[Any]]:
        """The rule as the artifact stores it."""
        return {f.name: list(rule) for f, rule in self.conditions}

    def contains(self, record: Mapping[str, Any]) -> bool:
        return all(rule[0] <= record[f.name] <= rule[1] if f.kind == "numeric"
                   else record[f.name] in rule for f, rule in self.conditions)

    def condition(self) -> pl.Expr:
        """`contains` as a polars expression over a frame of rows (the release's counts)."""
        import polars as pl  # only the release needs it

        cond = pl.lit(True)
        for f, rule in self.conditions:
            cond = cond & (pl.col(f.name).is_between(rule[0], rule[1], closed="both")
                           if f.kind == "numeric" else pl.col(f.name).is_in(list(rule)))
        return cond

    def overlaps(self, other: CohortRule) -> bool:
        """Two boxes overlap unless some field both name separates them."""
        theirs = {f.name: rule for f, rule in other.conditions}
        for f, ra in self.conditions:
            rb = theirs.get(f.name)
            if rb is None:
                continue
            if f.kind == "numeric":
                lo, hi = max(ra[0], rb[0]), min(ra[1], rb[1])
                if f.is_integer:
                    lo = math.ceil(lo)
                if lo > hi:
                    return False
            elif not set(ra) & set(rb):
                return False
        return True


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def format_edges(edges: Sequence[float]) -> str:
    """Bin edges as a reader writes them: ``[0, 45, 80, 105]``."""
    return "[" + ", ".join(_fmt(e) for e in edges) + "]"


# ----- loading ---------------------------------------------------------------------------

def load_schema(path: str | Path) -> Schema:
    """Read and check a schema file; every problem is a one-line `UserError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: schema file not found") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: schema file is not UTF-8 text") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read schema file ({e.strerror})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno})") from None
    return parse_schema(raw, source=str(p))


def parse_schema(raw: Any, source: str = "schema") -> Schema:
    """Check a schema object and classify its fields."""

    def bad(msg: str) -> UserError:
        return UserError(f"{source}: {msg}")

    if not isinstance(raw, dict):
        raise bad("the schema must be a JSON object")
    if raw.get("$schema", DRAFT_2020_12) != DRAFT_2020_12:
        raise bad(f"unsupported '$schema'; use \"{DRAFT_2020_12}\"")
    try:
        Draft202012Validator.check_schema(raw)
    except SchemaError as e:
        where = "/".join(str(x) for x in e.path) or "top level"
        raise bad(f"not a valid JSON Schema at {where}: {e.message}") from None
    unknown = sorted(set(raw) - _ALLOWED_TOP)
    if unknown:
        raise bad(f"unsupported top-level keyword(s) {unknown}; supported: {sorted(_ALLOWED_TOP)}")
    if raw.get("type") != "object":
        raise bad('top level must have "type": "object"')
    props = raw.get("properties")
    if not isinstance(props, dict) or not props:
        raise bad('"properties" must list at least one field')
    order = raw.get("x-field-order", list(props))
    if sorted(order) != sorted(props):
        raise bad('"x-field-order" must name every property exactly once')
    if sorted(raw.get("required", [])) != sorted(props):
        raise bad('"required" must list every property (records have no optional fields)')
    if raw.get("additionalProperties", True) is not False:
        raise bad('set "additionalProperties": false so records cannot carry extra fields')

    id_field = raw.get("x-id")
    if id_field is not None and id_field not in props:
        raise bad(f"x-id names '{id_field}', which is not a property")
    fields = tuple(_parse_field(name, props[name], name == id_field, bad) for name in order)
    label = _parse_label(raw.get("x-label"), fields, bad)
    linkage = _parse_linkage(raw.get("x-linkage", []), props, id_field, bad)
    name = str(raw.get("title") or "dataset")
    return Schema(raw=raw, name=name, fields=fields, label=label, id_field=id_field,
                  linkage_fields=linkage,
                  persons=parse_persons(raw, fields, id_field, label, bad))


def _parse_label(label: Any, fields: tuple[Field, ...], bad: Any) -> str:
    """``x-label``: a categorical field of at least two classes."""
    if label is None:
        raise bad('name the label field with "x-label"')
    lf = next((f for f in fields if f.name == label), None)
    if lf is None:
        raise bad(f"x-label names '{label}', which is not a property")
    if lf.kind != "categorical":
        raise bad(f"the label '{label}' must be a categorical field (an enum)")
    if len(lf.enum) < 2:
        raise bad(f"the label '{label}' needs at least two classes")
    return label


def _parse_linkage(linkage: Any, props: dict[str, Any], id_field: str | None,
                   bad: Any) -> tuple[str, ...]:
    """``x-linkage``: properties other than the id (which extracts re-key)."""
    if not (isinstance(linkage, list) and all(isinstance(x, str) for x in linkage)):
        raise bad('"x-linkage" must be a list of field names')
    for x in linkage:
        if x not in props or x == id_field:
            raise bad(f"x-linkage names '{x}', which is not a property other than the id "
                      "(the id is re-keyed between extracts)")
    return tuple(linkage)


def _parse_field(name: str, spec: Any, is_id: bool, bad: Any) -> Field:
    if not isinstance(spec, dict):
        raise bad(f"field '{name}': its definition must be an object")
    unknown = sorted(set(spec) - _ALLOWED_FIELD)
    if unknown:
        raise bad(f"field '{name}': unsupported keyword(s) {unknown}; "
                  f"supported: {sorted(_ALLOWED_FIELD)}")
    jtype = spec.get("type")
    if not isinstance(jtype, str):
        raise bad(f"field '{name}': give exactly one \"type\" (integer, number or string)")
    desc = str(spec.get("description") or spec.get("title") or name.replace("_", " "))
    if "examples" in spec and (is_id or "enum" in spec or jtype != "string"):
        raise bad(f"field '{name}': \"examples\" are for free-text fields only")
    if is_id:
        return _parse_id(name, spec, jtype, desc, bad)
    if "enum" in spec:
        return _parse_enum(name, spec["enum"], jtype, desc, bad)
    if jtype in ("integer", "number"):
        return _parse_numeric(name, spec, jtype, desc, bad)
    if jtype == "string":
        return _parse_text(name, spec, desc, bad)
    raise bad(f"field '{name}': unsupported type '{jtype}' (use integer, number, string or enum)")


def _parse_id(name: str, spec: dict[str, Any], jtype: str, desc: str, bad: Any) -> Field:
    if jtype not in ("string", "integer") or "enum" in spec:
        raise bad(f"field '{name}': the person id must be a string or integer (no enum)")
    if jtype == "string" and "maxLength" not in spec:
        raise bad(f"field '{name}': the person id needs a maxLength")
    return Field(name, "id", jtype, desc, max_length=int(spec.get("maxLength", 0)))


def _parse_enum(name: str, values: Any, jtype: str, desc: str, bad: Any) -> Field:
    if jtype not in ("string", "integer"):
        raise bad(f"field '{name}': enums must be of type string or integer")
    if not values or len(set(map(repr, values))) != len(values):
        raise bad(f"field '{name}': enum must be non-empty with distinct values")
    want = str if jtype == "string" else int
    if any(type(v) is not want for v in values):
        raise bad(f"field '{name}': every enum value must be of type {jtype}")
    return Field(name, "categorical", jtype, desc, enum=tuple(values))


def _parse_text(name: str, spec: dict[str, Any], desc: str, bad: Any) -> Field:
    if "maxLength" not in spec:
        raise bad(f"field '{name}': free-text fields need a maxLength")
    lo, hi = int(spec.get("minLength", 0)), int(spec["maxLength"])
    if not 0 <= lo <= hi or hi == 0:
        raise bad(f"field '{name}': need 0 <= minLength <= maxLength and maxLength > 0")
    return Field(name, "text", "string", desc, min_length=lo, max_length=hi,
                 examples=_parse_examples(name, spec.get("examples", []), lo, hi, bad))


def _parse_examples(name: str, raw: Any, lo: int, hi: int, bad: Any) -> tuple[str, ...]:
    """A free-text field's ``examples``: public texts that show the LLM what the field holds
    (the schema is public: never put a real record's text here)."""
    if not isinstance(raw, list) or len(raw) > MAX_EXAMPLES:
        raise bad(f"field '{name}': \"examples\" must be a list of at most {MAX_EXAMPLES} "
                  "texts")
    for i, t in enumerate(raw):
        if not isinstance(t, str) or not lo <= len(t) <= hi or not t.strip():
            raise bad(f"field '{name}': examples[{i}] must be a non-blank text of {lo} to "
                      f"{hi} characters")
    return tuple(dict.fromkeys(" ".join(t.split()) for t in raw))


def _parse_numeric(name: str, spec: dict[str, Any], jtype: str, desc: str, bad: Any) -> Field:
    if "minimum" not in spec or "maximum" not in spec:
        raise bad(f"field '{name}': numeric fields need both minimum and maximum")
    lo, hi = spec["minimum"], spec["maximum"]
    if not all(isinstance(x, int | float) and math.isfinite(x) for x in (lo, hi)) or lo >= hi:
        raise bad(f"field '{name}': need finite minimum < maximum")
    if jtype == "integer" and not (float(lo).is_integer() and float(hi).is_integer()):
        raise bad(f"field '{name}': integer bounds must be whole numbers")
    precision = 0
    if jtype == "number":
        precision = spec.get("x-precision", DEFAULT_PRECISION)
        if not isinstance(precision, int) or not 0 <= precision <= 6:
            raise bad(f"field '{name}': x-precision must be an integer from 0 to 6")
    elif "x-precision" in spec:
        raise bad(f"field '{name}': x-precision applies to numbers, not integers")
    bins = spec.get("x-bins")
    if bins is None:
        step = (hi - lo) / DEFAULT_BIN_COUNT
        bins = [lo + i * step for i in range(DEFAULT_BIN_COUNT)] + [hi]
    if (not isinstance(bins, list) or len(bins) < 2
            or not all(isinstance(x, int | float) and math.isfinite(x) for x in bins)):
        raise bad(f"field '{name}': x-bins must be a list of at least two numbers")
    if any(b >= a for a, b in zip(bins[1:], bins[:-1], strict=True)):
        raise bad(f"field '{name}': x-bins must be strictly increasing")
    if bins[0] != lo or bins[-1] != hi:
        raise bad(f"field '{name}': x-bins must start at minimum ({lo}) and end at maximum ({hi})")
    return Field(name, "numeric", jtype, desc, minimum=lo, maximum=hi,
                 bins=tuple(float(b) for b in bins), precision=precision)


def demo_schema_path(people: bool = False) -> Path:
    """The bundled schema of the fictional ED-triage demo data (``people``: of its people
    with visit histories, `selpe_audit.demo.generator.generate_people`)."""
    name = "ed_triage_people" if people else "ed_triage"
    return Path(__file__).parent / "data" / f"{name}.schema.json"
