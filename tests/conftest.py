"""Shared fixtures: the bundled demo schema and sample, the session's models and keys, and
small file helpers; the markers' rules.

The session loads each model once: every test, release and decode in this process uses the
process's `selpe_audit.models.shared` (the `models` fixture). `_model_loads` counts every
construction of an LLM context and of an embedder by what was loaded; the session fails at
its end if anything was loaded twice, or if a test not marked ``model`` asked for a model
(so `make test-fast`, which leaves ``model`` out, provably runs none).

Markers (pyproject.toml) say what a test needs: ``model`` (the LLM or the embedder),
``slow`` (over ~5 s here), ``peer`` (smartnoise-synth's venv, `make peers`), ``postgres``
(the PostgreSQL server binaries). A ``postgres`` or ``peer`` test whose requirement is missing
is skipped on a developer's machine and fails in CI (``CI`` set), where `.ci/run` installs
both: a leg that CI skips guards nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest

# `make test` runs one pytest worker per usable CPU (pytest-xdist): each worker keeps to its
# own CPU, before torch, JAX or llama.cpp size their thread pools, so two LLM or embedder
# tests side by side never fight over the same cores (llama.cpp threads spin: two decodes on
# two shared cores run 10-20x slower than on one core each).
if (_WORKER := os.environ.get("PYTEST_XDIST_WORKER", "")).startswith("gw"):
    _cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {_cpus[int(_WORKER[2:]) % len(_cpus)]})

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# JAX keeps compiled programs for this session (and the CLI subprocesses it starts): mbi's
# model fit jits fresh closures per fit, so without it every decode of the same model
# shapes compiles again (34 s of 207 in the llm_text smoke run). Public programs only: the
# fit's inputs are DP measurements.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = tempfile.mkdtemp(prefix="selpe-test-jax-")  # removed when the session ends
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

from release.dp import enable as enable_opendp
from selpe_audit.models import Models, shared
from selpe_audit.schema import Schema, demo_schema_path, load_schema

enable_opendp()  # as each command does at its entry (the tests call mechanisms directly)

#: (kind, what) -> constructions in this session (`_model_loads`)
MODEL_LOADS: Counter[tuple[str, str]] = Counter()
#: tests that asked `Models` for a model without the ``model`` marker
UNMARKED_MODEL_USE: set[str] = set()
_current: list[pytest.Item] = []  # the test being run (set up, called, torn down)


def _requirement_missing(item: pytest.Item) -> str | None:
    """What a ``postgres`` or ``peer`` test needs and this machine lacks, if anything."""
    if item.get_closest_marker("postgres"):
        from tests.postgres import postgres_bin

        if postgres_bin() is None:
            return "PostgreSQL server binaries not installed (scripts/system-deps.sh)"
    if item.get_closest_marker("peer"):
        from benchmarks.smartnoise_peer import PeerFailed, peer_python

        try:
            peer_python()
        except PeerFailed as e:
            return str(e)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


def pytest_runtest_setup(item):
    missing = _requirement_missing(item)
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test: {missing}", pytrace=False)
    pytest.skip(missing)


def _note_model_use() -> None:
    if _current and _current[-1].get_closest_marker("model") is None:
        UNMARKED_MODEL_USE.add(_current[-1].nodeid)


@pytest.fixture(scope="session", autouse=True)
def _model_loads():
    """Count every `LLM` and `Embedder` construction by its configuration."""
    from selpe_audit.kernel.embeddings import Embedder
    from selpe_audit.llm.models import LLM

    llm_init, emb_init = LLM.__init__, Embedder.__init__

    def counted_llm(self, path, **kw):
        llm_init(self, path, **kw)  # a file llama.cpp refuses is not a load
        MODEL_LOADS["llm", f"{Path(path).name} n_ctx={kw['n_ctx']} n_seq={kw['n_seq']} "
                           f"gpu={kw['n_gpu_layers']}"] += 1

    def counted_embedder(self, model=None, **kw):
        emb_init(self, model, **kw)  # a folder that fails to load is not a load
        MODEL_LOADS["embedder", f"{self._dir.resolve()} {kw}"] += 1

    def noted(ask):
        def ask_noted(self, *args, **kw):
            _note_model_use()
            return ask(self, *args, **kw)
        return ask_noted

    mp = pytest.MonkeyPatch()
    mp.setattr(LLM, "__init__", counted_llm)
    mp.setattr(Embedder, "__init__", counted_embedder)
    mp.setattr(Models, "llm", noted(Models.llm))
    mp.setattr(Models, "embedder", noted(Models.embedder))
    yield MODEL_LOADS
    mp.undo()


#: files whose tests are each a unit of work of their own for `make test`'s workers (whole
#: studies and Monte-Carlo audits, tens of seconds each, no costly module fixtures); every
#: other file runs whole on one worker, so its module fixtures are built once
SPREAD_FILES = {"test_benchmarks_smoke.py", "test_audits.py"}


def _weight(item: pytest.Item) -> float:
    """A rough cost in seconds, to hand out the longest work first (so the last test of a run
    is short): a benchmark's smoke run 1-5 minutes, an audit about one, another slow test
    5-60 s (measured on the 2-core machine)."""
    if item.get_closest_marker("slow"):
        return {"test_benchmarks_smoke.py": 120.0, "test_audits.py": 60.0}.get(
            item.path.name, 15.0)
    return 2.0 if item.get_closest_marker("model") else 0.3


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`--dist loadgroup`): a file is one unit of work, but for
    SPREAD_FILES where each test is one; units ordered longest first."""
    if not _WORKER:
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        unit = item.nodeid if item.path.name in SPREAD_FILES else item.path.name
        if unit == item.path.name:
            item.add_marker(pytest.mark.xdist_group(unit))
        units.setdefault(unit, []).append(item)
    ordered = sorted(units.values(), key=lambda unit: -sum(map(_weight, unit)))
    items[:] = [item for unit in ordered for item in unit]


def _model_problems() -> list[str]:
    """What this process's tests did wrong with the models (the session fails on any)."""
    problems = [f"models loaded more than once in this session (use the `models` fixture): "
                f"{kind} {what}: {n} times" for (kind, what), n in MODEL_LOADS.items() if n > 1]
    problems += [f"a test asked for a model without the `model` marker: {name}"
                 for name in sorted(UNMARKED_MODEL_USE)]
    return problems


#: problems the workers reported (`pytest_testnodedown`), for the controller's session end
WORKER_PROBLEMS: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    WORKER_PROBLEMS.extend(getattr(node, "workeroutput", {}).get("model_problems", []))


def pytest_sessionfinish(session, exitstatus):
    if "_JAX_CACHE" in globals():
        shutil.rmtree(_JAX_CACHE, ignore_errors=True)
    problems = _model_problems()
    if hasattr(session.config, "workeroutput"):  # a worker: its controller reports them
        session.config.workeroutput["model_problems"] = problems
        return
    problems += WORKER_PROBLEMS
    if problems:
        print("\n" + "\n".join(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def models(_model_loads) -> Models:
    """The session's models: the process's own, so releases and decodes that load them
    themselves (`run_release`, `run_decode`, the audits) share them too."""
    return shared()


@pytest.fixture(scope="session")
def llm(models):
    """The bundled LLM, loaded once per session (4 sequences, 4096 tokens of context)."""
    return models.llm()


@pytest.fixture(scope="session")
def embedder(models):
    """The bundled embedder, loaded once per session."""
    return models.embedder()


@pytest.fixture(scope="session")
def keys(tmp_path_factory):
    """One release key pair and one reviewer key pair for the session: ((priv, pub, id)
    of the release key, the same of the reviewer's)."""
    from selpe_audit.artifact.signing import generate_keypair

    d = tmp_path_factory.mktemp("keys")
    return generate_keypair(d / "release.pem"), generate_keypair(d / "reviewer.pem")

ROOT = Path(__file__).resolve().parents[1]
DEMO_SAMPLE = ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv"


@pytest.fixture(autouse=True)
def _ledger_folder(tmp_path_factory, monkeypatch):
    """The installation's default lifetime ledger is a per-test folder: a test never
    charges (or reads) a real ledger, and no test fixes the folder unless it says so."""
    monkeypatch.setenv("SELPE_AUDIT_LEDGER", str(tmp_path_factory.mktemp("ledger")))
    monkeypatch.delenv("SELPE_AUDIT_LEDGER_FIXED", raising=False)


def demo_release(tmp: Path, key: Path, **overrides) -> Path:
    """A demo release made with examples/release.toml (decode tests start from one)."""
    from release.config_file import load_config
    from release.pipeline import run_release

    cfg = load_config(ROOT / "examples" / "release.toml", {
        "schema": demo_schema_path(), "release_key": key, "out": tmp / "art",
        "lifetime_ledger": tmp / "ledger", **overrides})
    run_release(cfg)
    return cfg.out


@pytest.fixture(scope="session")
def counts_artifact(tmp_path_factory, keys) -> Path:
    """The session's counts-only release of the demo sample (the default, model counts mode),
    signed by the session's release key: the decode, chunk and shard tests read it, and a
    test that adds to an artifact copies it first."""
    return demo_release(tmp_path_factory.mktemp("counts"), keys[0][0], counts_share=1.0,
                        selection_share=0.0)


@pytest.fixture(scope="session")
def demo_schema() -> Schema:
    return load_schema(demo_schema_path())


@pytest.fixture(scope="session")
def demo_schema_path_() -> Path:
    return demo_schema_path()


def good_row(i: int = 1) -> dict:
    """One valid demo row (fictional)."""
    return {
        "patient_id": f"P{i:06d}", "age": 44, "sex": "female", "arrival_mode": "walk-in",
        "temperature_c": 37.1, "heart_rate": 88, "respiratory_rate": 16, "o2_saturation": 98,
        "systolic_bp": 128, "diastolic_bp": 82, "pain_score": 3,
        "chief_complaint": "sore throat for two days", "disposition": "discharged", "acuity": 4,
    }


def with_settings(cfg, **flat):
    """``cfg`` with settings changed by their flat CLI-override names (``epsilon``,
    ``selection_mode``, ``cohorts``...); the new config is checked on construction."""
    from dataclasses import replace

    from release.config_file import OVERRIDES, mode_setting_owner

    own = {k: v for k, v in flat.items() if k not in OVERRIDES and mode_setting_owner(k)}
    top = {k: v for k, v in flat.items() if k not in OVERRIDES and k not in own}
    sections: dict = {}
    for key, value in flat.items():
        if key in OVERRIDES:
            section, name = OVERRIDES[key]
            sections.setdefault(section, {})[name] = value
    if own or "mode" in sections.get("selection", {}):  # a new mode starts from its defaults
        sections.setdefault("selection", {})["settings"] = own or None
    return replace(cfg, **top, **{s: replace(getattr(cfg, s), **v) for s, v in sections.items()})
