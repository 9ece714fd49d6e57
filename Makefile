# Every target sets up what it needs: on a fresh machine `make run` or `make test` is all there is.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/tempoconf demo

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	@for script in bench/bench_*.py; do $(BIN)/python $$script || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .tempoconf .pytest_cache
