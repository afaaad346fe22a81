# The README's two commands: `make demo` (the main job on the demo data) and `make test`.
# Both set everything up on a fresh machine first (scripts/install.sh).
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast lint install bench wheelhouse doctor

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

# Every test, every marker (CI runs this): slow (needs the bundled LLM or embedder),
# install (the offline wheelhouse install, for real) and audit (Monte-Carlo privacy audits).
test: lint
	$(BIN)/python -m pytest

# The quick loop while developing: no model, no install, no Monte-Carlo audit.
test-fast: lint
	$(BIN)/python -m pytest -m "not slow and not install and not audit"

bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks

# Every wheel an air-gapped enclave needs, into $(WHEELHOUSE) (docs/deployment.md).
WHEELHOUSE ?= wheelhouse
wheelhouse:
	scripts/wheelhouse.sh $(WHEELHOUSE)
