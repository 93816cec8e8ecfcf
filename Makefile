# make setup   -> .venv from nothing, and Debian's chromium for the browser tests (idempotent; seconds once done)
# make test    -> setup, then the whole test suite (CPU, no downloads)
# make demo    -> setup, then the whole pipeline on the tiny model and toy videos
# make test-slurm -> setup, Debian's slurm-wlm + munge when absent, then the sbatch scripts under a
#                    real Slurm on localhost (tests/slurm/test_real_slurm.py; root; minutes)
# make lint    -> ruff
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TORCH_PAIR := torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.PHONY: setup browser test test-fast test-slurm demo lint clean

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
	$(PY) -m pytest -q --durations=15 tests

test-fast: setup
	$(PY) -m pytest -q -m "not slow" tests

test-slurm: setup
	@if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then \
		echo "test-slurm: installing slurm-wlm and munge"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; \
	fi
	PROACTIVE_REAL_SLURM=1 $(PY) -m pytest -q -x tests/slurm/test_real_slurm.py

demo: setup
	$(PY) -m train.demo

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf runs outputs multirun .pytest_cache
