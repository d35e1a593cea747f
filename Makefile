# Two commands on a fresh machine: `make demo` (or the shorter `make demo-quick`) and `make test`.
# Each creates .venv when it is missing: the demo installs the project with the `demo` extra
# (only what the demo imports), the tests with `dev` (every extra and the tools; it includes demo).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# one stamp per install, so that `make demo` never stands in for the tests' larger one
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# torch's CPU build: PyPI's torch for Linux is the CUDA build, with its nvidia-* packages (GBs)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo demo-quick test pytest lint docs bench venv clean

# torch first, the CPU build pinned in constraints.txt: a wheel already on disk (pip's
# find-links) where there is one, else PyTorch's CPU index; the project's install keeps it
define install
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-deps --no-index -c constraints.txt torch 2>/dev/null \
		|| $(PY) -m pip install --quiet --no-deps --index-url $(TORCH_INDEX) -c constraints.txt torch
	$(PY) -m pip install --quiet -c constraints.txt -e '.[$(1)]'
endef

$(STAMP): pyproject.toml constraints.txt
	$(call install,dev)
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml constraints.txt
	$(call install,demo)
	touch $(DEMO_STAMP)

venv: $(STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

# the same demo on less (random, loss-rank and AutoSelector, a smaller budget comparison), into its own folder
demo-quick: $(DEMO_STAMP)
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
