# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install ui-assets browser bytecode demo test test-prep test-unit test-e2e test-gpu lint docs-cli bench bench-gpu clean mlflow-server wandb-sdk

# rtjob ui's chart library, from the committed web/package-lock.json (npm ci), copied into the package's static
# folder (git-ignored, shipped as package data; a build without it, e.g. `pip install .` without npm, leaves it out
# and `rtjob ui` then says in one line what it lacks).
UI_VENDOR := cli/rtjob/ui/static/vendor
UI_ASSETS := $(UI_VENDOR)/uPlot.iife.min.js $(UI_VENDOR)/uPlot.min.css

$(UI_ASSETS) &: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	mkdir -p $(UI_VENDOR)
	cp web/node_modules/uplot/dist/uPlot.iife.min.js web/node_modules/uplot/dist/uPlot.min.css $(UI_VENDOR)/
	cp web/node_modules/uplot/LICENSE $(UI_VENDOR)/uPlot.LICENSE

ui-assets: $(UI_ASSETS)

# The browser tests' headless Chromium and its driver (Debian's), installed when missing.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver)

$(STAMP): pyproject.toml $(UI_ASSETS)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

# The tracking tests' real MLflow server (tests/support/mlflow_server.py): its own venv, since mlflow is heavy and
# neither rtjob's client nor its run side needs it (they speak MLflow's REST API with the standard library).
# Pinned: 3.18.0 does not install from this project's index, 3.17.2 does.
MLFLOW_VENV := .venv-mlflow
MLFLOW_VERSION := 3.17.2
# A test tool's own venv (a canned recipe): $(call tool_venv,FOLDER,REQUIREMENT)
define tool_venv
$(PY) -m venv $(1)
$(1)/bin/pip install -q '$(2)'
touch $@
endef
$(MLFLOW_VENV)/.installed-$(MLFLOW_VERSION):
	$(call tool_venv,$(MLFLOW_VENV),mlflow==$(MLFLOW_VERSION))

mlflow-server: $(MLFLOW_VENV)/.installed-$(MLFLOW_VERSION)

# The W&B mirror's test (tests/e2e/test_tracking_wandb.py): W&B's own SDK in a venv of its own, as a job's
# environment that has `wandb` (rtjob never installs it: the run side imports it only where the job brings it).
WANDB_VENV := .venv-wandb
WANDB_VERSION := 0.31.0
$(WANDB_VENV)/.installed-$(WANDB_VERSION):
	$(call tool_venv,$(WANDB_VENV),wandb==$(WANDB_VERSION))

wandb-sdk: $(WANDB_VENV)/.installed-$(WANDB_VERSION)

# The main job on the embedded local Ray cluster, offline (synthetic data via the job's local profile).
demo: install
	$(BIN)/rtjob submit ddp-resnet --nodes 2; rc=$$?; $(BIN)/rtjob local down; exit $$rc

# Lint, types, and the layer rules (import-linter contracts in pyproject.toml; see docs/ARCHITECTURE.md).
lint: install
	$(BIN)/ruff check cli rtjob_contract training tests benchmarks tools
	$(BIN)/mypy cli/rtjob
	$(BIN)/lint-imports --no-logo

# The generated reference pages (every command's --help, the job schema): run after changing a command, an option
# or the schema; tests/unit/test_docs.py (in the unit tier, so in `make test`) fails while they are stale.
docs-cli:
	$(BIN)/python tools/gen_reference.py

# Bytecode for rtjob's own sources (and the tests' helpers), as `pip install rtjob` leaves it: the editable install
# has none, and with PYTHONDONTWRITEBYTECODE set (as on this project's machines) every rtjob command a test or a
# benchmark starts would compile its modules again (~0.06 s of CPU per command; the suites start hundreds).
bytecode: install
	$(BIN)/python -m compileall -q cli/rtjob rtjob_contract training tests/support

# What `make test` needs, side by side (rtjob's venv, the tracking tests' venvs and the browser are independent
# installs, mostly waiting on the network and the disk; lint and bytecode follow rtjob's venv): a clean clone's
# set-up in about the time of rtjob's own install and lint, instead of every step in turn.
test-prep:
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint browser bytecode mlflow-server wandb-sdk

# pytest exits 5 when it collected no tests: a failure here, like any non-zero code.
# The fast tests first (no cluster, about a minute; 2 pytest-xdist workers, one file each: module fixtures run once;
# in a shuffled order, pytest-randomly: a fixed seed, so CI is repeatable; `make test-unit UNIT_SEED=N`
# tries another order, and a failing order is replayed with its printed seed),
# then the real cluster and S3 server ones (2 pytest-xdist workers, one file each, the longest first: each worker
# starts its own shared cluster and S3 servers; see tests/conftest.py).
# GPU-only tests carry the `gpu` marker (tests/gpu): deselected here, run by `make test-gpu` on a GPU machine.
UNIT_SEED ?= 20261127
test: test-prep
	@echo "unit tests in a shuffled order: UNIT_SEED=$(UNIT_SEED)"
	$(BIN)/python -m pytest -q -ra -m "not gpu" -p randomly --randomly-seed=$(UNIT_SEED) -n 2 --dist loadfile tests/unit
	$(BIN)/python -m pytest -q -ra -m "not gpu" -n 2 --dist loadfile --durations=25 tests/e2e

test-unit: bytecode
	@echo "unit tests in a shuffled order: UNIT_SEED=$(UNIT_SEED)"
	$(BIN)/python -m pytest -q -m "not gpu" -p randomly --randomly-seed=$(UNIT_SEED) -n 2 --dist loadfile --durations=15 tests/unit

test-e2e: bytecode browser mlflow-server wandb-sdk
	$(BIN)/python -m pytest -q -ra -m "not gpu" -n 2 --dist loadfile --durations=25 tests/e2e

# On a machine with a CUDA GPU (its own Python with torch; no venv needed, GPU_PY=python3 by default): the
# gpu-marked tests, and the GPU benchmark (benchmarks/gpu_bench.py, <= 5 min; its table under $OUT or benchmarks/).
GPU_PY ?= $(shell test -x $(BIN)/python && echo $(BIN)/python || echo python3)
test-gpu:
	$(GPU_PY) -m pytest -q -ra -p no:cacheprovider -m gpu tests/gpu

bench-gpu:
	$(GPU_PY) benchmarks/gpu_bench.py --out $${OUT:-benchmarks}/gpu-results.md

bench: bytecode  # rtjob's commands compiled, as the peers' are
	$(BIN)/pip install -q -e '.[bench]'  # the storage benchmarks' S3 server (SeaweedFS)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) $(MLFLOW_VENV) web/node_modules $(UI_VENDOR) .pytest_cache .mypy_cache .ruff_cache
