# Reproduction of Fagan & Iyengar (2018) and Titsias (2016).
# `make reproduce` regenerates every table and figure; `make test` runs the tests.
# Both create .venv from requirements.lock (every package pinned, with its sha256) when
# it is missing; `make lock` recompiles the lock from pyproject.toml.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
PEERS_STAMP := $(VENV)/.peers-stamp
# the exact versions and sha256 of every package `make venv` installs (any OS), and of
# those `make reproduce-extra` and `make bench` add (PyTorch's CPU wheel: Linux x86-64)
LOCK := requirements.lock
PEERS_LOCK := requirements-peers.lock
export SOFTMAX_DATA_DIR ?= $(CURDIR)/data/raw
export DATA_MIRROR ?= $(abspath $(CURDIR)/../shared/data)
# keep numba's compiled kernels between runs
export NUMBA_CACHE_DIR ?= $(CURDIR)/build/numba-cache
PYTEST_WORKERS ?= 2
# checksums of the raw data; rewritten only when they change, so the notebooks rerun
# exactly when the data change
DATA_STAMP := build/data.stamp
# the project's Python; a .venv made with another one is made again
PY_VERSION := 3.11
PY_VERSION_OF = $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
VENV_VERSION := $(shell test -x $(BIN)/python && $(call PY_VERSION_OF,$(BIN)/python))

.PHONY: help venv lock data table1 reproduce reproduce-steps reproduce-extra reproduce-extra-steps targets test test-second-kernel verify smoke-record bench lab site site-check clean clean-all FORCE

help:  ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'
	@echo
	@echo "One notebook at its small smoke settings (seconds to minutes; writes under build/smoke/):"
	@echo "  $(BIN)/python -m scalable_softmax.repro.machinery.runner run 09-ove-toy-2d --profile smoke"
	@echo "At the papers' settings without touching the record (writes under build/explore/):"
	@echo "  $(BIN)/python -m scalable_softmax.repro.machinery.runner run 09-ove-toy-2d --profile full"
	@echo "Only make reproduce / reproduce-extra write tables/, figures/ and notebooks/executed/."

# remade when the lock or pyproject.toml changes or when .venv's Python is not $(PY_VERSION);
# pip checks every file against the lock's sha256 (--require-hashes), then installs the
# project itself, editable, without dependencies (they are all in the lock)
$(STAMP): $(LOCK) pyproject.toml $(if $(filter $(PY_VERSION),$(VENV_VERSION)),,FORCE)
	@if test -e $(VENV) && test "$(VENV_VERSION)" != "$(PY_VERSION)"; then \
	  if test ! -f $(VENV)/pyvenv.cfg; then \
	    echo "error: $(VENV) is not a virtual environment of Python $(PY_VERSION) and was not made by make; move it away and run make again"; exit 1; fi; \
	  echo "$(VENV) was made with $(if $(VENV_VERSION),Python $(VENV_VERSION),a Python that no longer runs); the project needs Python $(PY_VERSION): making it again with $(PYTHON)"; \
	fi
	@test -n "$(PYTHON)" || { echo "error: Python $(PY_VERSION) not found (set PYTHON=/path/to/python$(PY_VERSION))"; exit 1; }
	@v=$$($(call PY_VERSION_OF,$(PYTHON))); test "$$v" = "$(PY_VERSION)" || { \
	  echo "error: PYTHON=$(PYTHON) is Python $${v:-(not runnable)}; the project needs Python $(PY_VERSION) (pyproject.toml requires-python): run make again with PYTHON=/path/to/python$(PY_VERSION)"; exit 1; }
	@if test -e $(VENV) && test "$(VENV_VERSION)" != "$(PY_VERSION)"; then rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

venv: $(STAMP)  ## create .venv from requirements.lock (hash-checked)

# The locks, compiled from pyproject.toml by uv (`uv pip compile --generate-hashes`):
# requirements.lock holds the extras `make venv` installs, for Python 3.11 on any OS
# (3.11.5 or later: soupsieve 4.1.3 needs it); requirements-peers.lock adds the `peers`
# and `bench` extras (PyTorch's CPU wheel, found through pip's configured find-links) for
# Linux x86-64, constrained by requirements.lock. Versions already in a lock are kept;
# to move some: make lock LOCK_ARGS='--upgrade-package numpy' (or --upgrade for all). A
# lock is rewritten only when it changes (so that .venv is remade only then).
VENV_EXTRAS := repro dask test lab site
UV_VERSION := 0.13.8
LOCK_TOOL := build/lock-tool
LOCK_ARGS ?=
UV_COMPILE = $(LOCK_TOOL)/bin/uv pip compile pyproject.toml --generate-hashes \
  --quiet --python-version 3.11.5 --custom-compile-command 'make lock' $(LOCK_ARGS)
lock:  ## recompile requirements.lock and requirements-peers.lock from pyproject.toml (uv)
	test -x $(LOCK_TOOL)/bin/uv || { $(PYTHON) -m venv $(LOCK_TOOL) && \
	  $(LOCK_TOOL)/bin/python -m pip install --quiet uv==$(UV_VERSION); }
	test ! -f $(LOCK) || cp $(LOCK) build/lock.new
	$(UV_COMPILE) $(addprefix --extra ,$(VENV_EXTRAS)) --universal -o build/lock.new
	cmp -s build/lock.new $(LOCK) || mv build/lock.new $(LOCK)
	test ! -f $(PEERS_LOCK) || cp $(PEERS_LOCK) build/peers-lock.new
	fl=$$($(LOCK_TOOL)/bin/python -m pip config get global.find-links 2>/dev/null); \
	$(UV_COMPILE) $(addprefix --extra ,$(VENV_EXTRAS) peers bench) \
	  --python-platform x86_64-manylinux_2_28 $${fl:+--find-links $$fl} -c $(LOCK) -o build/peers-lock.new
	cmp -s build/peers-lock.new $(PEERS_LOCK) || mv build/peers-lock.new $(PEERS_LOCK)
	rm -f build/lock.new build/peers-lock.new

data: $(STAMP)  ## fetch the raw data (from DATA_MIRROR, else the public homes) and verify every sha256
	$(BIN)/python -m scalable_softmax.data fetch

$(DATA_STAMP): FORCE | data
	@$(BIN)/python -m scalable_softmax.data stamp $@

table1: data  ## print the paper's Table 1 beside ours
	$(BIN)/python -m scalable_softmax.data table1

# extensions beyond the papers, run by `make reproduce-extra` (outside the 50-minute budget of `make reproduce`)
EXTRA_NAMES := 11-tuned-rates 12-peers 13-real-large-k 14-crossover
NOTEBOOK_NAMES := $(filter-out $(EXTRA_NAMES),$(basename $(notdir $(wildcard notebooks/[0-9][0-9]-*.ipynb))))
EXECUTED := $(patsubst %,build/executed/full/%.ipynb,$(NOTEBOOK_NAMES))
EXTRA_EXECUTED := $(patsubst %,build/executed/full/%.ipynb,$(EXTRA_NAMES))
LIB_SOURCES := $(shell find lib -name '*.py' -not -path '*/__pycache__/*')

# one executed notebook per source notebook; reruns only when the notebook, its
# settings, the library or the data changed. --publish (here and nowhere else) writes the
# record: tables/, figures/ and the committed executed copy notebooks/executed/$*.ipynb
build/executed/full/%.ipynb: notebooks/%.ipynb params/%.yaml $(LIB_SOURCES) $(DATA_STAMP) | $(STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m scalable_softmax.repro.machinery.runner run $* --profile full --publish

# notebook 06 assembles Table 3 from notebook 02's runs (read back from build/runs)
build/executed/full/06-paper-tables.ipynb: build/executed/full/02-dataset-run.ipynb
# notebook 11 reads notebook 03's tuned rates and notebook 06's Table 3 (and shares 02's runs)
build/executed/full/11-tuned-rates.ipynb: build/executed/full/03-learning-rate-tuning.ipynb \
  build/executed/full/06-paper-tables.ipynb

tables/data-table1.md: $(LIB_SOURCES) $(DATA_STAMP) | $(STAMP)
	$(BIN)/python -m scalable_softmax.data table1 --write tables/data-table1

# the end-to-end time of `make reproduce` (.venv, data, Table 1, notebooks) is measured
# here and written to tables/PROVENANCE.md; then the README's and docs' quoted numbers are
# recomputed from the new tables (python -m scalable_softmax.repro.machinery.numbers). Its own files
# go under build/ (build/reproduce.started); keep a run's log there too
# (make reproduce > build/reproduce.log 2>&1): the repository's root holds only the entries
# tests/test_layout.py declares, and a committed log at the root fails the tests
reproduce:  ## regenerate every table and figure, the executed notebooks and PROVENANCE.md
	@mkdir -p build && date -u +%Y-%m-%dT%H:%M:%SZ > build/reproduce.started
	@$(MAKE) --no-print-directory reproduce-steps
	$(BIN)/python -m scalable_softmax.repro.machinery.runner provenance --profile full \
	  --run reproduce --started "$$(cat build/reproduce.started)"
	$(BIN)/python -m scalable_softmax.repro.machinery.numbers render

reproduce-steps: data tables/data-table1.md $(EXECUTED)

# notebooks 12 and 14 compare with scikit-learn and PyTorch: the optional `peers` extra;
# they race to the targets of tables/targets.csv (made by `make targets`, never here) and
# rerun when those change
build/executed/full/12-peers.ipynb build/executed/full/14-crossover.ipynb: $(PEERS_STAMP) tables/targets.csv

tables/targets.csv:
	@echo "error: tables/targets.csv is missing: notebooks 12 and 14 race to its targets; run make targets first (the reference runs, about an hour on 2 cores)" >&2; exit 1

$(PEERS_STAMP): $(STAMP) $(PEERS_LOCK)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(PEERS_LOCK)
	touch $@

# (after `make reproduce` its own steps are no-ops, so the time recorded is the extensions')
reproduce-extra:  ## also the extensions (notebook 11: Table 3 at our tuned rates; 12: peers; 13: real data at K = 10,000; 14: the crossover in K)
	@mkdir -p build && date -u +%Y-%m-%dT%H:%M:%SZ > build/reproduce-extra.started
	@$(MAKE) --no-print-directory reproduce-steps reproduce-extra-steps
	$(BIN)/python -m scalable_softmax.repro.machinery.runner provenance --profile full \
	  --run reproduce-extra --started "$$(cat build/reproduce-extra.started)"
	$(BIN)/python -m scalable_softmax.repro.machinery.numbers render

targets: $(BENCH_STAMP) data  ## the race's reference runs: tables/targets.csv, the targets of notebooks 12 and 14 (params/targets.yaml; about an hour on 2 cores; not part of reproduce-extra)
	$(BIN)/python -m scalable_softmax.repro.race.targets --profile full

reproduce-extra-steps: $(EXTRA_EXECUTED)

# nbval's options, both runs: its default 60 s for a kernel to answer ran out once in a
# fresh-clone CI run (the second-kernel run, two kernels starting at once on 2 cores)
NBVAL_OPTS := --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval/sanitize.cfg \
  --nbval-kernel-startup-timeout 300

# the notebooks under nbval run as the runner runs them: without progress bars
# (SCALABLE_SOFTMAX_PROGRESS=off, as in the stored outputs)
# without the data (offline, no mirror) the tests that need them are reported as
# skipped, with the reason; under CI (CI=true) missing data is an error. The lint
# (ruff, configured in pyproject.toml) runs first: it takes a second and fails fast
test: $(STAMP)  ## lint, then run the unit tests and every notebook's smoke run (nbval)
	$(BIN)/ruff check lib tests benchmarks
	@$(BIN)/python -m scalable_softmax.data fetch || { \
	  if test "$${CI:-}" = true; then echo "error: the data could not be fetched (above); under CI the data tests must run"; exit 1; fi; \
	  echo "warning: the data could not be fetched (above): the tests that need them will be reported as skipped"; }
	rm -rf build/prepared/smoke
	@if ls notebooks/[0-9][0-9]-*.ipynb >/dev/null 2>&1; then \
	  $(BIN)/python -m scalable_softmax.repro.machinery.runner prepare all --profile smoke >/dev/null; fi
	SCALABLE_SOFTMAX_PROGRESS=off OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile \
	  $(NBVAL_OPTS) \
	  tests $$(test -d build/prepared/smoke && echo build/prepared/smoke)
	test ! -d build/prepared/smoke || $(BIN)/python -m scalable_softmax.repro.machinery.verify --tables build/smoke/tables --record $(SMOKE_RECORD)
	@test ! -d build/prepared/smoke || $(MAKE) --no-print-directory test-second-kernel

# the BLAS-sensitive smoke notebooks again, under another OpenBLAS kernel (x86-64; say
# which loads; elsewhere skipped): their key cells under nbval and their tables against
# the smoke record, within params/tolerances.yaml. A fresh run cache, so nothing is
# read back from the first run.
BLAS_SENSITIVE := 00-derivation-checks 08-ove-nonparametric 09-ove-toy-2d 10-ove-classification
SECOND_CORETYPE ?= Prescott
test-second-kernel: $(STAMP)
	rm -rf build/runs-second-kernel $(BLAS_SENSITIVE:%=build/smoke/tables/%.csv) $(BLAS_SENSITIVE:%=build/smoke/tables/%-*.csv)
	SOFTMAX_RUN_CACHE=$(CURDIR)/build/runs-second-kernel SCALABLE_SOFTMAX_PROGRESS=off \
	  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
	  $(BIN)/python -m scalable_softmax.repro.machinery.blaskernel --coretype $(SECOND_CORETYPE) -- \
	  $(BIN)/python -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile \
	  $(NBVAL_OPTS) \
	  $(BLAS_SENSITIVE:%=build/prepared/smoke/%.ipynb)
	@if $(BIN)/python -c 'import platform, sys; sys.exit(platform.machine().lower() not in ("x86_64", "amd64"))'; then \
	  $(BIN)/python -m scalable_softmax.repro.machinery.verify --tables build/smoke/tables --record $(SMOKE_RECORD) \
	    --notebooks $(BLAS_SENSITIVE); fi

# a rerun checked against the record: every table of tables/ (or VERIFY_TABLES) against
# git HEAD (or VERIFY_RECORD, a revision or a folder), with params/tolerances.yaml
# NOTEBOOKS="09-ove-toy-2d ..." compares only the tables those notebooks write
VERIFY_TABLES ?= tables
VERIFY_RECORD ?= HEAD
NOTEBOOKS ?=
verify: $(STAMP)  ## compare tables/ (e.g. after make reproduce) with the committed record, within params/tolerances.yaml (NOTEBOOKS="..." for part of it)
	$(BIN)/python -m scalable_softmax.repro.machinery.verify --tables $(VERIFY_TABLES) --record $(VERIFY_RECORD) \
	  $(if $(strip $(NOTEBOOKS)),--notebooks $(NOTEBOOKS))

# the smoke profile's tables that make test checks its smoke runs against; regenerate
# (and commit) after a change that moves the results on purpose
SMOKE_RECORD := tests/smoke-record
smoke-record: $(STAMP)  ## rerun every notebook's smoke profile and store its tables in tests/smoke-record
	rm -rf build/smoke/tables
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m scalable_softmax.repro.machinery.runner run all --profile smoke
	mkdir -p $(SMOKE_RECORD) && rm -f $(SMOKE_RECORD)/*.csv && cp build/smoke/tables/*.csv $(SMOKE_RECORD)/
	$(BIN)/python -m scalable_softmax.repro.machinery.runner record-nbval all

$(BENCH_STAMP): $(STAMP) $(PEERS_LOCK)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(PEERS_LOCK)
	touch $@

bench: $(BENCH_STAMP) data  ## run the benchmarks (results in benchmarks/results/)
	$(BIN)/python benchmarks/bench_evaluate.py
	$(BIN)/python benchmarks/bench_sgd.py
	$(BIN)/python benchmarks/bench_implicit.py
	$(BIN)/python benchmarks/bench_sampled.py
	$(BIN)/python benchmarks/bench_implicit_batch.py

# JupyterLab on the collection; a headless machine opens nothing and prints the URL
LAB_PORT ?= 8888
LAB_IP ?= 127.0.0.1
lab: $(STAMP)  ## open the notebooks in JupyterLab (prints the URL to open; Ctrl-C stops it)
	$(BIN)/jupyter lab --no-browser --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) \
	  --ServerApp.root_dir=$(CURDIR) --LabApp.default_url=/lab/tree/notebooks \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

site: $(STAMP)  ## static HTML site in build/site from the executed notebooks, README, docs/math.md
	$(BIN)/python -m scalable_softmax.repro.machinery.site build

# headless Chromium is installed only when asked: make site-check INSTALL=1. The browser is
# any of chromium, chromium-browser, google-chrome (as repro/machinery/site.py looks for it); the
# hint fits the system (/etc/os-release): Debian's apt package chromium, Ubuntu's snap
# (Ubuntu's apt package chromium-browser only installs the snap) or Google Chrome
INSTALL ?=
OS_RELEASE ?= /etc/os-release
site-check: site  ## open the site in headless Chromium: screenshots in build/site-screenshots/, fails on raw pipe text, a second parameters cell or a clipped table (INSTALL=1 installs Chromium)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	command -v google-chrome >/dev/null || { \
	  os=" $$(. $(OS_RELEASE) 2>/dev/null; echo $$ID $$ID_LIKE) "; \
	  case "$$os" in *" ubuntu "*) os=ubuntu;; *" debian "*) os=debian;; *) os=other;; esac; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  if [ "$(INSTALL)" = 1 ] && [ $$os = debian ]; then \
	    echo "installing Debian's chromium package (INSTALL=1)"; \
	    $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-upgrade chromium || exit 1; \
	  elif [ "$(INSTALL)" = 1 ] && [ $$os = ubuntu ]; then \
	    echo "installing the chromium snap (INSTALL=1; Ubuntu packages Chromium as a snap)"; \
	    $$SUDO snap install chromium || exit 1; \
	  else case $$os in \
	    debian) hint="on Debian: sudo apt-get install chromium; or run make site-check INSTALL=1 to have make install it";; \
	    ubuntu) hint="on Ubuntu: sudo snap install chromium (the apt package chromium-browser only installs that snap), or Google Chrome (google-chrome) from https://www.google.com/chrome/; or run make site-check INSTALL=1 to have make install the snap";; \
	    *) hint="with your system's package manager: Chromium or Google Chrome (make site-check INSTALL=1 can install it on Debian and Ubuntu only)";; esac; \
	    echo "error: no headless browser: none of chromium, chromium-browser, google-chrome is on PATH; install one $$hint"; exit 1; fi; }
	$(BIN)/python -m scalable_softmax.repro.machinery.site screenshots

clean:  ## remove build/ (run cache, numba cache, site) and .pytest_cache (keeps data, figures, tables, notebooks/executed)
	rm -rf build .pytest_cache

clean-all: clean  ## also remove .venv and processed data (keeps raw data)
	rm -rf $(VENV) data/processed
