# Two entry points for a fresh machine: `make demo` and `make test`.
# The demo needs the core install only (numpy, scipy, orjson, typer, rich: no torch);
# the tests need every CPU extra, and the CPU build of torch first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= demo-out

.PHONY: demo test docs stress bench clean

$(VENV)/.core-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev-installed: $(VENV)/.core-installed
	$(BIN)/python -m pip install -q torch==2.13.0  # the CPU build; an unpinned torch pulls CUDA packages
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.core-installed
	$(BIN)/cheems example-data -o $(OUT)
	$(BIN)/cheems rank $(OUT)/annotations/open.jsonl $(OUT)/annotations/human.jsonl -o $(OUT)/bench.jsonl --report $(OUT)/conflicts.json
	$(BIN)/cheems stats $(OUT)/bench.jsonl
	$(BIN)/cheems eval $(OUT)/bench.jsonl --scorer length --json $(OUT)/eval-length.json
	$(BIN)/cheems eval $(OUT)/bench.jsonl --scorer random --seed 0 --json $(OUT)/eval-random.json

# pytest exits 5 when it collected no test: that is a failure here, said out loud. The tests run
# in one process per core (pytest-xdist, at most 4), each giving torch one thread (tests/conftest.py).
# Bytecode is written (to the __pycache__ folders git ignores) even where PYTHONDONTWRITEBYTECODE
# is set, so that the workers and the many processes the tests start compile each file once.
test: $(VENV)/.dev-installed
	@env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist worksteal; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

$(VENV)/.docs-installed: $(VENV)/.core-installed
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $@

# The documentation site, into site/: the pages of docs/, the CLI reference generated from the
# `cheems` app (docs/scripts/gen_cli_reference.py) and the API reference from the docstrings.
# --strict: a broken link, a missing page or a docstring mkdocstrings cannot read fails the build.
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

# The suite three times in a row, each in another random order, with one busy process per core beside
# it: what a loaded or slower machine would show (tests/stress.sh; ROUNDS=N for another count).
stress: $(VENV)/.dev-installed
	@bash tests/stress.sh $(BIN)/python $(or $(ROUNDS),3)

bench: $(VENV)/.dev-installed
	$(BIN)/python benchmarks/bench_resolve.py
	$(BIN)/python benchmarks/bench_rank_cli.py
	$(BIN)/python benchmarks/bench_scoring.py
	$(BIN)/python benchmarks/bench_judge.py
	$(BIN)/python benchmarks/bench_batching.py
	$(BIN)/python benchmarks/bench_train.py
	$(BIN)/python benchmarks/bench_curate_judge.py
	$(BIN)/python benchmarks/bench_distant_supervision.py
	$(BIN)/python benchmarks/bench_big_prompt.py
	$(BIN)/python benchmarks/bench_catalog.py
	$(BIN)/python benchmarks/bench_objectives.py
	$(BIN)/python benchmarks/bench_local_judge.py
	$(BIN)/python benchmarks/bench_serve.py
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_step_needs.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache site
