# The README's two commands: `make demo` (the main job on the demo data) and `make test`.
# Both set everything up on a fresh machine first (scripts/install.sh).
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast lint install peers peer-mostlyai bench expected-gaps wheelhouse doctor base-image image \
	image-decode image-test

$(VENV)/.installed: pyproject.toml scripts/install.sh scripts/install-llama.sh
	VENV=$(VENV) scripts/install.sh
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/selpe-audit doctor
	$(BIN)/selpe-audit demo --out out/demo

doctor: $(VENV)/.installed
	$(BIN)/selpe-audit doctor

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# smartnoise-synth's venv for the peer runs (benchmarks.smartnoise_peer), built once under
# ~/.cache/selpe-audit and reused by every clone; seconds when it is there.
peers: $(VENV)/.installed
	$(BIN)/python -m benchmarks.smartnoise_peer --build

# MOSTLY AI's engine for the persons benchmark (benchmarks.mostlyai_peer; torch, transformers,
# opacus: about 2.7 GB), built the same way; only `make bench` (the full run) needs it.
peer-mostlyai: $(VENV)/.installed
	$(BIN)/python -m benchmarks.mostlyai_peer --build

# One pytest worker per usable CPU, each kept to its own CPU (tests/conftest.py); a test file
# runs whole on one worker, the benchmark smoke runs and audits one by one, longest first.
# `make test PARALLEL=` runs in one process.
WORKERS ?= $(shell nproc)
PARALLEL ?= -n $(WORKERS) --dist loadgroup --no-loadscope-reorder

# Every test, every marker (CI runs this): model (the bundled LLM or embedder), slow (over
# ~20 s), peer (smartnoise-synth), postgres, install (the offline wheelhouse install, for
# real) and audit (Monte-Carlo privacy audits).
test: lint peers
	$(BIN)/python -m pytest $(PARALLEL)

# The quick loop while developing (<= 5 minutes): no model, nothing slow, no peer, no install.
test-fast: lint
	$(BIN)/python -m pytest $(PARALLEL) -m "not model and not slow and not peer and not install"

bench: $(VENV)/.installed peers peer-mostlyai
	$(BIN)/python -m benchmarks

# The gaps `selpe-audit demo` quotes, from the last full small_tables run in RESULTS.json.
expected-gaps: $(VENV)/.installed
	$(BIN)/python -m benchmarks.expected_gaps

# Every wheel an air-gapped enclave needs, into $(WHEELHOUSE) (docs/deployment.md).
WHEELHOUSE ?= wheelhouse
wheelhouse:
	scripts/wheelhouse.sh $(WHEELHOUSE)

# Images, built here with podman from a Debian base made from Debian's packages, every package
# from the wheelhouse, no network in the build (docs/deployment.md; root). image-test runs the
# release image's work inside it with no network and searches its layers for keys and canaries.
base-image:
	scripts/base-image.sh

image:
	scripts/image.sh release

image-decode:
	scripts/image.sh decode-cpu

image-test:
	scripts/image-test.sh
