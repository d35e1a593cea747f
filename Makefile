# Two commands on a fresh machine: `make demo` (or the shorter `make demo-quick`) and `make test`.
# Each creates .venv when it is missing and installs the project with its extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo demo-quick test pytest lint docs bench venv clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# the same demo on less: random and loss-rank only, a smaller budget comparison
demo-quick: $(STAMP)
	$(PY) examples/demo.py --quick

# CI (.ci/run) runs exactly this: lint, the strict docs build, then the tests
test: lint docs pytest

# two workers, a test file each at a time (module fixtures run once); `pytest tests` alone runs serially.
# Skips are listed with their reasons (-rs) and fail the run, but for a test marked gpu (tests/conftest.py)
pytest: $(STAMP)
	BATCHSEL_NO_SKIPS=1 $(PY) -m pytest -n 2 --dist loadfile -rs tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# strict: a broken link, reference or docstring fails the build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
