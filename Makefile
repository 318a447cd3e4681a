# Two commands on a fresh machine: `make evidence` and `make test`. Everything else is help.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KERNEL := dirty-runs-evidence
EVIDENCE_ARGS ?=
SCENARIOS ?=
REPEAT ?=
PARAMS ?=
PG ?=
VERSIONS ?=
OLD ?=
NEW ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
SINCE ?=
SHARD ?=
OBJECTS ?=
SHARDS ?=
LOAD ?=
# the full performance study (make perf): every pool size, the polling pools, the anchor's idle pool,
# the plain-client comparison, history growth and the long soaks; repeats until every ratio's 95 %
# interval is within +-10 % or ten minutes of pools are spent
PERF_PARAMS := workers=1,2,4,8 seconds=2 pool_repetitions=3 pool_budget=600 pool_systems=raw,anchor,v1,v2,v2_polling \
  idle_systems=v2,anchor lone_runs=40 soak_runs=400 restart_runs=150 compare_repetitions=3 growth_points=0,10000,100000
# pytest processes (pytest-xdist), each with its own throwaway server: the suite mostly waits on
# locks, leases and sessions, so three beat two even on 2 cores
TEST_WORKERS ?= 3
# PG=15: run on that PostgreSQL major's installed server binaries (Debian's postgresql-15)
ifneq ($(strip $(PG)),)
export EVIDENCE_PG := $(strip $(PG))
endif

.PHONY: help setup test lint check-schema pytest pgtap evidence matrix compare races races-accept regress-accept example bench perf mutation merge lab clean

help: ## list the targets
	@echo "Dirty Runs evidence: make <target>"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  %-14s %s\n", $$1, $$2}'
	@echo ""
	@echo "Set DATABASE_URL to use your own PostgreSQL; otherwise a throwaway embedded one (PostgreSQL 18) is started."
	@echo "PG=15 runs test/evidence on Debian's PostgreSQL 15 binaries (sudo apt-get install postgresql-15)."

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: python3.11 (or python3 >= 3.11) with venv is required"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $(PYTHON) is older than 3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Dirty Runs evidence (.venv)" >/dev/null
	@touch $(STAMP)

setup: $(STAMP) ## create .venv, install the project, register the Jupyter kernel

lint: $(STAMP) ## ruff + mypy --strict on evidence_lib
	$(BIN)/ruff check evidence_lib examples tests
	$(BIN)/mypy

check-schema: $(STAMP) ## prove migrations/ and sql/ give the same engine catalog
	$(BIN)/python -m evidence_lib check-schema

pytest: $(STAMP) ## the pytest suite (real PostgreSQL, real PGMQ, real sessions)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=10

pgtap: $(STAMP) ## the pgTAP files with pg_prove (says loudly when pgTAP is missing)
	$(BIN)/python -m evidence_lib pgtap

test: lint check-schema pytest pgtap ## everything CI runs: lint, schema sync, pytest, pgTAP (PG=15 on PostgreSQL 15)

evidence: $(STAMP) ## run the evidence notebooks, write a dated bundle (SCENARIOS=races REPEAT=20 PARAMS="queue_modes=step" PG=15 JOBS=1 SHARD=2/3)
	$(BIN)/python -m evidence_lib evidence --jobs $(JOBS) $(if $(SCENARIOS),--scenarios $(SCENARIOS)) $(if $(REPEAT),--repeat $(REPEAT)) $(if $(SHARD),--shard $(SHARD)) $(foreach p,$(PARAMS),-p $(p)) $(EVIDENCE_ARGS)

matrix: $(STAMP) ## the correctness scenarios on every installed PostgreSQL version into one bundle (VERSIONS=18,15)
	$(BIN)/python -m evidence_lib matrix --jobs $(JOBS) $(if $(VERSIONS),--versions $(VERSIONS)) $(if $(SCENARIOS),--scenarios $(SCENARIOS)) $(if $(REPEAT),--repeat $(REPEAT)) $(foreach p,$(PARAMS),-p $(p)) $(EVIDENCE_ARGS)

compare: $(STAMP) ## compare two bundles: make compare OLD=outputs/<bundle> NEW=outputs/<bundle>
	@test -n "$(OLD)" -a -n "$(NEW)" || { echo "usage: make compare OLD=outputs/<older bundle> NEW=outputs/<newer bundle>"; exit 2; }
	$(BIN)/python -m evidence_lib compare "$(OLD)" "$(NEW)"

races: $(STAMP) ## only the races into a bundle, every interleaving REPEAT times (default 3); LOAD=1 under a competing load (the stability check: REPEAT=30 LOAD=1)
	$(BIN)/python -m evidence_lib evidence --scenarios races --repeat $(or $(REPEAT),3) $(if $(LOAD),-p load=true) --cell-timeout $$(( $(or $(REPEAT),3) * 200 + 600 )) $(foreach p,$(PARAMS),-p $(p))

regress-accept: $(STAMP) ## rewrite tests/expected/regress/*.out, the SQL probes' transcripts (review the diff before committing)
	$(BIN)/python -m evidence_lib regress --accept

races-accept: $(STAMP) ## rewrite tests/expected/races/*.out from a run (review the diff before committing)
	$(BIN)/python -m evidence_lib races --accept

example: $(STAMP) ## run the moderation example end to end (plain flow, then private step queues)
	$(BIN)/python -m examples.moderation

bench: $(STAMP) ## benchmark: raw PGMQ vs the engine on one server, one run (printed, no bundle)
	$(BIN)/python -m evidence_lib bench
perf: $(STAMP) ## the full performance study as a bundle of its own (every pool size, soaks, history; ~12 min); make compare reads it
	$(BIN)/python -m evidence_lib evidence --scenarios performance --jobs 1 --cell-timeout 3600 $(foreach p,$(PERF_PARAMS),-p $(p)) $(foreach p,$(PARAMS),-p $(p))

mutation: $(STAMP) ## the full mutation sweep into outputs/mutation-*/ (JOBS=2 PART_JOBS=4 SINCE=origin/main SHARD=1/4 OBJECTS=v2_claim)
	$(BIN)/python -m evidence_lib mutation --jobs $(JOBS) $(if $(PART_JOBS),--part-jobs $(PART_JOBS)) $(if $(SINCE),--since $(SINCE)) $(if $(SHARD),--shard $(SHARD)) $(if $(OBJECTS),--objects $(OBJECTS))

merge: $(STAMP) ## merge shards into one: evidence bundles (SHARDS="outputs/a outputs/b", OUT optional) or mutation reports (OUT required)
	@test -n "$(SHARDS)" || { echo "usage: make merge SHARDS=\"<shard folders>\" [OUT=<folder>]"; exit 2; }
	$(BIN)/python -m evidence_lib merge $(SHARDS) $(if $(OUT),--out $(OUT))

lab: $(STAMP) ## open the notebooks in JupyterLab (installs it on first use)
	$(BIN)/python -m pip install --quiet -e '.[dev,lab]'
	$(BIN)/jupyter lab notebooks/

clean: ## remove .venv and caches (bundles in outputs/ are kept)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
