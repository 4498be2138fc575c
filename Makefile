# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

# The main job on the embedded local Ray cluster, offline (synthetic data via the job's local profile).
demo: install
	$(BIN)/rtjob submit ddp-resnet --nodes 2; rc=$$?; $(BIN)/rtjob local down; exit $$rc

lint: install
	$(BIN)/ruff check cli training tests benchmarks
	$(BIN)/mypy cli/rtjob

# pytest exits 5 when it collected no tests: a failure here, like any non-zero code.
test: lint
	$(BIN)/python -m pytest -q -ra --durations=15

bench: install
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
