# The README's commands. Every target that needs Python creates .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.fwx-installed
PYTEST_ARGS ?=

.PHONY: install test-deps run test lint typecheck bench gpu-check docker-test docker-all clean

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

## make test-deps: the Debian packages the tests drive, in one apt call: nginx (tests/deploy/test_rolling.py
## puts it in front of three replicas), prometheus for promtool (deploy/monitoring/ rules), chromium (the
## HTML report in a real browser), qemu-user (tests/quantize/test_int8_cpu.py runs an INT8 model on an emulated
## AVX2-only CPU). RUNLEVEL=1 keeps apt from starting a system nginx or prometheus.
## CI sets FWX_REQUIRE_TOOLS=1 so those tests fail rather than skip when a package is missing.
TEST_TOOLS := nginx:nginx promtool:prometheus chromium:chromium qemu-x86_64:qemu-user
test-deps:
	@missing=""; for t in $(TEST_TOOLS); do \
	  command -v $${t%%:*} >/dev/null 2>&1 || test -x /usr/sbin/$${t%%:*} || missing="$$missing $${t##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "installing Debian packages:$$missing"; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
	  || echo "note: could not install$$missing; the tests that need them skip (fail under FWX_REQUIRE_TOOLS=1)"; \
	fi

## make test: the whole suite (CPU; GPU tests skip themselves).
test: $(STAMP) test-deps
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
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

## make docker-test: build the CPU image and a `fwx dockerize` image and run them as a user would (read-only
## root, no capabilities, uid 1000, REST + gRPC, hot reload, docker stop drains). Installs Debian's docker.io
## and starts dockerd without a bridge when missing; makes the base with debootstrap when the registry is
## out of reach (docker/ci.sh says how; its timings go to ~/.cache/fwx-ci/docker-ci.json).
docker-test: $(STAMP)
	PY=$(PY) bash docker/ci.sh

## make docker-all: build the CPU image with every runtime (FWX_EXTRAS=all: torch, TensorFlow, TFLite, ONNX, hf)
## and record its size, build time and cold starts (median of FWX_CI_COLD_RUNS, default 5) in
## ~/.cache/fwx-ci/docker-all.json. Not part of .ci/run: docs/docker.md says why.
docker-all: $(STAMP)
	PY=$(PY) bash docker/ci.sh all

clean:
	rm -rf $(VENV) artifacts .pytest_cache .mypy_cache .ruff_cache
