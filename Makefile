# make setup   -> .venv from nothing, and Debian's chromium for the browser tests (idempotent; seconds once done)
# make test    -> setup, then the whole test suite (CPU, no downloads)
# make demo    -> setup, then the whole pipeline on the tiny model and toy videos
# make test-slurm -> setup, Debian's slurm-wlm + munge when absent, then the sbatch scripts under a
#                    real Slurm on localhost (tests/slurm/test_real_slurm.py; root; minutes)
# make pictures -> docs/view.png and docs/app.png from make demo's SFT checkpoint and test records
#                  (pipeline/pictures.py, headless chromium; after make demo)
# make lint    -> ruff
# make gpu-check [DEVICE=cpu] [OUT=DIR] -> perf/gpu_check.py: SFT, GRPO, engine, compile, probes,
#                    eval.run on one GPU in 6 min with the install (the tiny model on CPU in 3);
#                    JSON + markdown under OUT
# make gpu-probe [DEVICE=cpu] -> perf/gpu_probe.py: eager vs static (graph-replayed) frame and reply
#                    steps, frame prep and sampling on host vs device, a GRPO rollout, an SFT step
#                    split, on one GPU in 4 min with the install; one JSON line
# make gpu-wheels -> the wheels gpu-check and gpu-probe need on a machine with torch but no registry, into .whl/
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PAIR := torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.installed
# the suite's parallel workers (pytest-xdist; one torch thread each): one per core of a 2-core machine
TEST_WORKERS ?= 2

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.PHONY: setup browser test test-fast test-slurm demo pictures lint clean gpu-check gpu-probe gpu-wheels

setup: $(STAMP) browser

# The browser tests (tests/eval/test_view.py) drive Debian's chromium through Playwright; nothing
# is downloaded by Playwright itself.
browser:
	@command -v chromium >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_PAIR)
	touch $@

$(STAMP): $(VENV)/.torch pyproject.toml
	DS_BUILD_OPS=0 $(PY) -m pip install -q -e '.[dev]'
	$(PY) -c "import torch, torchvision, transformers, peft, accelerate, deepspeed, datasets, decord, av, hydra, wandb"
	@# DeepSpeed builds its CPU shared-memory comm op at its first multi-process start (about a minute
	@# on 2 cores, cached under ~/.cache/torch_extensions): built here, once, not inside a test or a run
	$(PY) -c "import deepspeed.ops; from deepspeed.accelerator import get_accelerator; \
	  b = get_accelerator().create_op_builder('ShareMemCommBuilder'); \
	  b is None or not deepspeed.ops.__compatible_ops__.get(b.NAME) or b.load()"
	touch $@

test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

test-fast: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

test-slurm: setup
	@if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then \
		echo "test-slurm: installing slurm-wlm and munge"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; \
	fi
	PROACTIVE_REAL_SLURM=1 $(PY) -m pytest -q -x tests/slurm/test_real_slurm.py

demo: setup
	$(PY) -m pipeline.demo

pictures: setup
	$(PY) -m pipeline.pictures

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf runs outputs multirun .pytest_cache

# gpu-check and gpu-probe run from the working tree on a machine that has torch (the venv's python, else python3);
# modules it lacks are installed from the wheels of .whl/ (make gpu-wheels) into .whl/site, which
# PYTHONPATH puts before the system's packages (transformers 5.24 over an older one there).
DEVICE ?=
OUT ?= runs/gpu_check
CHECK_PY := $(if $(wildcard $(PY)),$(PY),python3)
WHEEL_PINS := hydra-core==1.3.8 omegaconf==2.3.1 av==18.1.0 transformers==5.24.0
WHEEL_PLATFORMS := $(foreach n,28 17,--platform manylinux_2_$(n)_x86_64) --platform manylinux2014_x86_64

# $(call WITH_WHEELS,NAME,COMMAND): COMMAND, after the wheels of .whl/ are installed into .whl/site
# when python -m perf NAME --missing names modules this python lacks
define WITH_WHEELS
	@export PYTHONPATH=$(CURDIR):$(CURDIR)/.whl/site$${PYTHONPATH:+:$$PYTHONPATH}; \
	missing=$$($(CHECK_PY) -m perf $(1) --missing); \
	if [ -n "$$missing" ] && ls .whl/*.whl >/dev/null 2>&1; then \
	  echo "$(1): installing $$missing from .whl/ into .whl/site"; \
	  $(CHECK_PY) -m pip install -q --no-index --no-deps --no-compile --upgrade --target .whl/site .whl/*.whl || exit 2; \
	fi; \
	$(2)
endef

gpu-check:
	$(call WITH_WHEELS,gpu_check,$(CHECK_PY) -m perf gpu_check $(if $(DEVICE),--device $(DEVICE)) --out $(OUT))

gpu-probe:
	$(call WITH_WHEELS,gpu_probe,$(CHECK_PY) -m perf gpu_probe $(if $(DEVICE),--device $(DEVICE)))

gpu-wheels:
	mkdir -p .whl
	$(CHECK_PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(WHEEL_PLATFORMS) -d .whl $(WHEEL_PINS)
	@# antlr4-python3-runtime 4.9.3 (omegaconf's parser) is published as a source archive only
	$(CHECK_PY) -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
	@du -ch .whl/*.whl | tail -1
