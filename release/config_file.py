"""The release configuration from a TOML file (reference: `release.config`) plus the
CLI's flat overrides (`load_config`), and the CLI arguments its fields declare
(`cli_settings`): both read the sections' dataclasses, so a setting is declared once."""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from release.config import ReleaseConfig
from release.config_sections import (
    BudgetConfig,
    CohortSpec,
    CountsConfig,
    PersonsConfig,
    PrivacyUnitConfig,
    RateSpec,
    SelectionConfig,
    mode_settings,
)
from release.database import is_database_url
from release.frame_source import FrameSource
from selpe_audit.artifact.modes import describe, mode_names, modes
from selpe_audit.errors import UserError


@dataclass(frozen=True)
class CliSetting:
    """One CLI argument of ``selpe-audit release``, as its config field declares it."""

    section: str | None  # None: a top-level setting
    flag: str
    key: str
    type: type
    choices: list[str] | None
    help: str



#: The sections' classes by TOML table (each is also the ReleaseConfig field of that name).
_SECTION_TYPES = {"budget": BudgetConfig, "privacy_unit": PrivacyUnitConfig,
                  "counts": CountsConfig, "persons": PersonsConfig,
                  "selection": SelectionConfig}
#: settings whose TOML key is not their field's name (budget's two shares)
_TOML_NAMES = {("budget", "counts_share"): "counts", ("budget", "selection_share"): "selection"}
#: fields set by their own TOML tables ([[cohorts]], [[rates]], [selection.<mode>]), not as
#: keys of their section
_OWN_TABLES = {"cohorts", "rates", "settings"}


def _section_keys() -> dict[str, dict[str, tuple[str, str]]]:
    """TOML table -> {TOML key: (config section, field)}, from the sections' fields: a
    setting is declared once, as a field of its section's class."""
    return {section: {_TOML_NAMES.get((section, f.name), f.name): (section, f.name)
                      for f in fields(cls) if f.name not in _OWN_TABLES}
            for section, cls in _SECTION_TYPES.items()}


_SECTIONS = _section_keys()
#: the top-level settings: ReleaseConfig's fields that are not sections
_TOP = {f.name for f in fields(ReleaseConfig)} - set(_SECTION_TYPES)
#: CLI override keys (flat, as `release.cli` passes them) -> (config section, field): each
#: field's name, and the key its declaration gives (``counts_mode``, ``selection_mode``)
OVERRIDES: dict[str, tuple[str, str]] = {
    **{f: (s, f) for table in _SECTIONS.values() for s, f in table.values()},
    **{f.metadata["key"]: (section, f.name) for section, cls in _SECTION_TYPES.items()
       for f in fields(cls) if f.metadata.get("key")},
    "cohorts": ("counts", "cohorts"), "rates": ("counts", "rates"),
}


def cli_settings() -> list[CliSetting]:
    """The CLI arguments of ``selpe-audit release``: every setting declared with help, top
    level first, then section by section, then the selection modes' own settings (a field
    with help in its metadata), with type, choices and default from the declaration."""
    out, flags = [], set()
    declared = [(None, ReleaseConfig), *_SECTION_TYPES.items(),
                *(("selection", d.settings) for d in modes())]
    for section, cls in declared:
        for f in fields(cls):
            m = f.metadata
            if not m.get("help") or (flag := m.get("flag") or
                                     "--" + f.name.replace("_", "-")) in flags:
                continue  # a mode sharing a setting's name shares its flag
            flags.add(flag)
            choices = m.get("choices")
            shown = (m.get("show_default", True) and f.default is not MISSING
                     and f.default is not None)
            out.append(CliSetting(
                section, flag, m.get("key") or f.name, _scalar_type(str(f.type)),
                list(choices() if callable(choices) else choices) if choices else None,
                m["help"] + (f" (default {f.default:g})" if shown and isinstance(f.default, float)
                             else f" (default {f.default})" if shown else "")))
    return out


def _scalar_type(annotation: str) -> type:
    """A field's CLI type from its annotation: bool (a switch), float, int, else str (paths
    are made by `load_config`)."""
    first = annotation.split("|")[0].strip()
    return {"bool": bool, "float": float, "int": int}.get(first, str)


def setting_keys() -> frozenset[str]:
    """Every flat key `load_config` takes as an override (the CLI's argument names)."""
    return frozenset(_TOP | OVERRIDES.keys() | {s.key for s in cli_settings()})


_PATHS = {"data", "schema", "out", "release_key", "lifetime_ledger", "candidates",
          "enclave_log", "deny"}


def load_config(path: str | Path | None, overrides: dict[str, Any]) -> ReleaseConfig:
    """TOML (optional) first, then non-None CLI overrides (flat keys: ``epsilon``,
    ``selection_mode``...); relative paths are kept as given. Checked on construction."""
    top, sections, mode_tables = _read_tables(_read_toml(path), str(path or "config"))
    active = overrides.get("selection_mode") or sections["selection"].get(
        "mode", SelectionConfig.mode)
    _apply_overrides(overrides, active, top, sections, mode_tables)
    for name, table in mode_tables.items():  # every mode's table is checked, used or not
        mode_settings(describe(name), table)
    sections["selection"]["settings"] = mode_tables.get(active)
    _complete_top(top)
    sel = sections["selection"]
    if "schedule" in sel:
        sel["schedule"] = tuple(sel["schedule"])
    in_memory = isinstance(top["data"], FrameSource)
    for values in (top, *sections.values()):
        for k in _PATHS & values.keys():
            if k == "data" and in_memory:
                continue
            if not (k in ("data", "lifetime_ledger") and is_database_url(str(values[k]))):
                values[k] = Path(values[k])
    try:
        return ReleaseConfig(**top, **{name: _SECTION_TYPES[name](**values)
                                       for name, values in sections.items()})
    except TypeError as e:
        raise UserError(f"config: {e}") from None


def _read_toml(path: str | Path | None) -> dict[str, Any]:
    """The TOML file's tables (none without a file); a missing or broken file in one line."""
    if path is None:
        return {}
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{p}: config file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: not valid TOML ({e})") from None


def _apply_overrides(overrides: dict[str, Any], active: str, top: dict[str, Any],
                     sections: dict[str, dict[str, Any]],
                     mode_tables: dict[str, dict[str, Any]]) -> None:
    """Each non-None flat override into its place: the top level, its section, or the
    table of the selection mode that owns it (``active`` first)."""
    for key, value in overrides.items():
        if value is None:
            continue
        if key in _TOP:
            top[key] = value
        elif key in OVERRIDES:
            section, name = OVERRIDES[key]
            sections[section][name] = value
        elif (owner := mode_setting_owner(key, active)) is not None:
            mode_tables.setdefault(owner, {})[key] = value
        else:
            raise UserError(f"config: unknown setting '{key}'")


def _complete_top(top: dict[str, Any]) -> None:
    """The required top-level settings present, the defaults filled in."""
    for needed in ("data", "schema"):
        if needed not in top:
            raise UserError(f"config: '{needed}' is required (in the TOML file or as --{needed})")
    if "dataset" not in top:
        top["dataset"] = _default_dataset(top)
    top.setdefault("out", "out/release")
    if "release_key" not in top:
        raise UserError("config: 'release_key' is required (TOML release_key or --key); make "
                        "one with 'selpe-audit keygen keys/release.pem'")


def _default_dataset(top: dict[str, Any]) -> str:
    """The ledger's dataset name when none is given: a file's stem, a database table's name;
    a query or a DataFrame must name it."""
    if isinstance(top["data"], FrameSource):
        raise UserError("config: name the dataset (dataset=...) when the rows come from a "
                        "DataFrame; the lifetime ledger is per dataset")
    if not is_database_url(str(top["data"])):
        return Path(top["data"]).stem
    if top.get("table"):
        return str(top["table"]).rsplit(".", 1)[-1]
    raise UserError("config: name the dataset (--dataset or dataset = ...) when the "
                        "rows come from a database query; the lifetime ledger is per "
                        "dataset")


def _read_tables(raw: dict[str, Any], src: str,
                 ) -> tuple[dict[str, Any], dict[str, dict], dict[str, dict]]:
    """The TOML's top-level settings, its sections' settings, and the selection modes' own
    tables (``[selection.<mode>]``)."""
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTION_TYPES}
    mode_tables: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        if key in _TOP:
            top[key] = value
        elif key in _SECTIONS and isinstance(value, dict):
            for k, v in value.items():
                if key == "selection" and k in mode_names() and isinstance(v, dict):
                    mode_tables[k] = v
                elif k in _SECTIONS[key]:
                    section, name = _SECTIONS[key][k]
                    sections[section][name] = v
                elif key == "selection" and (owner := mode_setting_owner(k)) is not None:
                    raise UserError(f"{src}: selection.{k} is a setting of selection mode "
                                    f"'{owner}': write it in a [selection.{owner}] table")
                else:
                    raise UserError(f"{src}: unknown setting '{key}.{k}'; known: "
                                    f"{sorted(_SECTIONS[key])}")
        elif key == "cohorts" and isinstance(value, list):
            sections["counts"]["cohorts"] = tuple(_cohort(c, src) for c in value)
        elif key == "rates" and isinstance(value, list):
            sections["counts"]["rates"] = tuple(_rate(r, src) for r in value)
        else:
            raise UserError(f"{src}: unknown setting '{key}'")
    return top, sections, mode_tables


def mode_setting_owner(key: str, active: str | None = None) -> str | None:
    """The selection mode a flat setting ``key`` belongs to (a CLI flag such as
    ``--utility``, or an old flat key of ``[selection]``): the ``active`` mode if its
    settings have that field, else the first mode's whose do."""
    owners = [d.name for d in modes() if key in {f.name for f in fields(d.settings)}]
    return active if active in owners else next(iter(owners), None)


def _cohort(c: Any, src: str) -> CohortSpec:
    if not isinstance(c, dict) or "name" not in c or not isinstance(c.get("where"), dict):
        raise UserError(f"{src}: each [[cohorts]] needs a name and a where table")
    where = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in c["where"].items()}
    return CohortSpec(str(c["name"]), where)


def _rate(r: Any, src: str) -> RateSpec:
    try:
        out = r["outcome"]
        return RateSpec(str(r["name"]), str(out["field"]), tuple(out["values"]),
                        tuple(r["cells"]))
    except (KeyError, TypeError):
        raise UserError(f"{src}: each [[rates]] needs name, outcome = {{ field, values }} "
                        "and cells = [fields]") from None
