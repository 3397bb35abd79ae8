# The README's commands. Every target that needs Python creates .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.fwx-installed
PYTEST_ARGS ?=

.PHONY: install run test lint typecheck bench gpu-check clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[all,dev,zoo]'
	# The test zoo's torchvision: PyPI's wheel is a CUDA build whose deps would replace CPU torch; its
	# classifiers need none of its C++ ops, so it goes in without deps (tests/zoo/models.py: import_torchvision).
	$(PY) -m pip install -q --no-deps -c constraints.txt 'torchvision==0.28.0'
	touch $(STAMP)

install: $(STAMP)

## make run: export the bundled sample to every format, validate it, serve it.
run: $(STAMP)
	$(PY) samples/walkthrough.py

## make test: the whole suite (CPU; GPU tests skip themselves).
test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/cli.py
	$(PY) benchmarks/validate.py
	$(PY) benchmarks/matrix.py
	$(PY) benchmarks/quantize.py
	$(PY) benchmarks/serve.py
	$(PY) benchmarks/lifecycle.py

## make gpu-check: GPU validation + GPU serving smoke (run on a machine with CUDA).
gpu-check: $(STAMP)
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) artifacts .pytest_cache .mypy_cache .ruff_cache
