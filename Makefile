# Reproduction of Fagan & Iyengar (2018) and Titsias (2016).
# `make reproduce` regenerates every table and figure; `make test` runs the tests.
# Both create .venv from the pins in pyproject.toml when it is missing.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
PEERS_STAMP := $(VENV)/.peers-stamp
export SOFTMAX_DATA_DIR ?= $(CURDIR)/data/raw
export DATA_MIRROR ?= $(abspath $(CURDIR)/../shared/data)
# keep numba's compiled kernels between runs
export NUMBA_CACHE_DIR ?= $(CURDIR)/build/numba-cache
PYTEST_WORKERS ?= 2

.PHONY: help venv data table1 reproduce reproduce-extra test bench clean clean-all

help:  ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: Python 3.11 not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(STAMP)  ## create .venv from the pinned dependencies

data: $(STAMP)  ## fetch and verify the raw data (from DATA_MIRROR, else the public homes)
	$(BIN)/python -m scalable_softmax.data fetch

table1: data  ## print the paper's Table 1 beside ours
	$(BIN)/python -m scalable_softmax.data table1

# extensions beyond the papers, run by `make reproduce-extra` (outside the 45-minute budget)
EXTRA_NAMES := 11-tuned-rates 12-peers
NOTEBOOK_NAMES := $(filter-out $(EXTRA_NAMES),$(basename $(notdir $(wildcard notebooks/[0-9][0-9]-*.ipynb))))
EXECUTED := $(patsubst %,build/executed/full/%.ipynb,$(NOTEBOOK_NAMES))
EXTRA_EXECUTED := $(patsubst %,build/executed/full/%.ipynb,$(EXTRA_NAMES))
LIB_SOURCES := $(shell find lib -name '*.py' -not -path '*/__pycache__/*')

# one executed notebook per source notebook; reruns only when the notebook, its
# settings or the library changed
build/executed/full/%.ipynb: notebooks/%.ipynb params/%.yaml $(LIB_SOURCES) | $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m scalable_softmax.notebooks run $* --profile full

# notebook 06 assembles Table 3 from notebook 02's runs (read back from build/runs)
build/executed/full/06-paper-tables.ipynb: build/executed/full/02-dataset-run.ipynb
# notebook 11 reads notebook 03's tuned rates and notebook 06's Table 3 (and shares 02's runs)
build/executed/full/11-tuned-rates.ipynb: build/executed/full/03-learning-rate-tuning.ipynb \
  build/executed/full/06-paper-tables.ipynb

tables/data-table1.md: $(LIB_SOURCES) | $(STAMP)
	$(BIN)/python -m scalable_softmax.data table1 --write tables/data-table1

reproduce: data tables/data-table1.md $(EXECUTED)  ## regenerate every table and figure
	$(BIN)/python -m scalable_softmax.notebooks provenance --profile full

# notebook 12 compares with scikit-learn and PyTorch: the optional `peers` extra
build/executed/full/12-peers.ipynb: $(PEERS_STAMP)

$(PEERS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[peers]'
	touch $@

reproduce-extra: reproduce $(EXTRA_EXECUTED)  ## also the extensions (notebook 11: Table 3 at our tuned rates, ~15 min; 12: peers, ~15 min)
	$(BIN)/python -m scalable_softmax.notebooks provenance --profile full

test: data  ## run the unit tests and every notebook's smoke run (nbval)
	rm -rf build/prepared/smoke
	@if ls notebooks/[0-9][0-9]-*.ipynb >/dev/null 2>&1; then \
	  $(BIN)/python -m scalable_softmax.notebooks prepare all --profile smoke >/dev/null; fi
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile \
	  --nbval-lax --nbval-current-env tests $$(test -d build/prepared/smoke && echo build/prepared/smoke)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

bench: $(BENCH_STAMP) data  ## run the benchmarks (results in benchmarks/results/)
	$(BIN)/python benchmarks/bench_evaluate.py
	$(BIN)/python benchmarks/bench_sgd.py
	$(BIN)/python benchmarks/bench_implicit.py
	$(BIN)/python benchmarks/bench_sampled.py
	$(BIN)/python benchmarks/bench_implicit_batch.py

clean:  ## remove executed notebooks and caches (keeps data, figures, tables)
	rm -rf build .pytest_cache

clean-all: clean  ## also remove .venv and processed data (keeps raw data)
	rm -rf $(VENV) data/processed
