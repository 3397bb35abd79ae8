# The README's commands. Every target that needs Python creates .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.fwx-installed
PYTEST_ARGS ?=

.PHONY: install test-deps browser tools run test lint typecheck bench gpu-check clean

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

## Debian's chromium, for the HTML report's headless-browser test (it skips, saying so, only if this fails).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	} || echo "chromium could not be installed: tests/validators/test_html_browser.py will skip"

## make test-deps: Debian packages tests need: nginx (tests/deploy/test_rolling.py puts it in front
## of three replicas). RUNLEVEL=1 keeps the package from starting a system nginx on port 80.
test-deps:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && RUNLEVEL=1 $$SUDO apt-get install -y -qq --no-install-recommends nginx; }

## make tools: promtool (Debian's prometheus package) checks deploy/monitoring/ in the tests.
## Best effort: without root or apt the monitoring tests fall back to YAML checks (promtool ones skip).
tools:
	@command -v promtool >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  ($$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus) >/dev/null 2>&1 \
	    && echo "installed promtool" \
	    || echo "note: could not install promtool (apt-get install prometheus); its tests will skip"; }

## make test: the whole suite (CPU; GPU tests skip themselves).
test: $(STAMP) test-deps tools browser
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
	$(PY) benchmarks/serve_workers.py
	$(PY) benchmarks/grpc_ab.py
	$(PY) benchmarks/grpc_floor.py
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/lifecycle.py

## make gpu-check: GPU validation + GPU serving smoke (run on a machine with CUDA).
gpu-check: $(STAMP)
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) artifacts .pytest_cache .mypy_cache .ruff_cache
