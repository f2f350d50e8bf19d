# Every target sets up .venv from pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MUTATION_STAMP := $(VENV)/.installed-mutation
FLOORS_VENV := .venv-floors
FLOORS_PY := $(FLOORS_VENV)/bin/python
FLOORS_STAMP := $(FLOORS_VENV)/.installed
# make test-floors: the fast tests that meet the libraries (Lightning's loop, checkpoints and loggers, timm's model,
# Mixup and attention, torchmetrics, Hydra and OmegaConf, W&B and its Reports, Pillow, matplotlib, filelock, the
# command lines' one-line errors): about half of the fast tests' time; the rest is the project's own maths.
FLOORS_TESTS = tests/test_config.py tests/test_cli.py tests/test_output_errors.py tests/training/test_module.py \
	tests/training/test_checkpoint_io.py tests/training/test_lock.py tests/training/test_recipe.py \
	tests/training/test_metrics_csv.py tests/wandb tests/report tests/analysis/test_capture.py \
	tests/analysis/test_summary.py tests/analysis/test_outputs.py tests/analysis/test_analyze_script.py \
	tests/data/test_hostile_data.py tests/data/sources/test_imagefolder.py tests/devtools/test_floors.py \
	tests/devtools/test_syncs.py

PROFILE ?= full        # full: the GPU recipe; smoke: a CPU-sized run of every rung; laptop: real CIFAR-10 in ~2 h on a CPU
DATA ?=                # cifar10 | synthetic | imagefolder | a folder or .tar(.xz) archive of train/ and test/
SEEDS ?= 0             # e.g. 0,1,2: every rung once per seed
LADDER ?=              # name of the ladder folder under outputs/ (default: the profile's name)
ARGS ?=                # more Hydra overrides, e.g. ARGS="trainer.devices=2"
CONFIRM_LONG ?=        # 1: train even when the ladder's estimate is beyond a day (the full recipe on a CPU)
RUN ?= outputs/full/epochs200  # make demo: the run folder (or checkpoint) to export
JOBS ?= 2              # make mutation: mutants tested at once
BUDGET ?= 480          # make gpu-check: seconds for the whole check
GPU_OUT ?=             # make gpu-check: its output folder (default: outputs/gpu-check/<date-time>)
GPU_PYTHON ?= python3  # make gpu-check: the GPU machine's own Python, with its torch

# make gpu-wheels: wheels for the GPU machine (Python 3.12, manylinux x86_64); pip matches each glibc tag exactly.
GPU_GLIBC_TAGS = manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1
GPU_PLATFORMS = $(foreach tag,$(GPU_GLIBC_TAGS),--platform $(tag)_x86_64)
GPU_ARCHIVE = ../shared/data/cifar10-jpeg.tar.xz

LADDER_DIR = outputs/$(if $(strip $(LADDER)),$(strip $(LADDER)),$(strip $(PROFILE)))
CONFIRM = $(if $(filter 1 yes true,$(strip $(CONFIRM_LONG))),--yes)
LADDER_ARGS = --seeds $(strip $(SEEDS)) --data "$(strip $(DATA))" $(CONFIRM) profile=$(strip $(PROFILE)) \
	$(if $(strip $(LADDER)),ladder=$(strip $(LADDER))) $(ARGS)

.PHONY: help ladder test test-slow test-floors lint format mutation report demo bench wandb-sync wandb-report gpu-wheels gpu-check \
	clean-venv

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'
	@echo "  variables: PROFILE=full|smoke|laptop  DATA=cifar10|synthetic|PATH  SEEDS=0,1,2  LADDER=name  ARGS='overrides'  JOBS=2"
	@echo "  PROFILE=laptop: the 7x6 model at width 48 on all of real CIFAR-10 with epochs scaled so the ladder takes about 2 h on 2 CPU cores; see docs/laptop.md"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

ladder: $(STAMP)  ## train every rung in order (skips finished ones), analyse each, write the report
	$(PY) scripts/ladder.py $(LADDER_ARGS)

report: $(STAMP)  ## rebuild outputs/<ladder>/report.md from the finished rungs
	$(PY) scripts/report.py $(LADDER_DIR)

wandb-sync: $(STAMP)  ## upload every offline W&B run of the ladder: rungs, their resumed parts, the report run
	$(PY) scripts/wandb_sync.py $(LADDER_DIR)

wandb-report: $(STAMP)  ## build and save a W&B Report of the ladder (online); prints its address
	$(PY) scripts/wandb_report.py $(LADDER_DIR)

demo: $(STAMP)  ## export the browser demo of RUN (a run folder or checkpoint)
	$(PY) scripts/export_demo.py $(strip $(RUN))

bench: $(STAMP)  ## benchmark the training loop against a bare PyTorch loop; writes outputs/bench.json
	$(PY) scripts/bench.py

gpu-wheels: $(STAMP)  ## here: the packages the GPU machine lacks into gpu/wheels/, CIFAR-10 into gpu/data/
	rm -rf gpu/wheels && mkdir -p gpu/wheels gpu/data
	grep 'sdist only' gpu/requirements.txt | cut -d' ' -f1 | xargs $(PY) -m pip wheel --quiet --no-deps -w gpu/wheels
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		$(GPU_PLATFORMS) --find-links gpu/wheels -d gpu/wheels -r gpu/requirements.txt
	if [ -f $(GPU_ARCHIVE) ]; then cp $(GPU_ARCHIVE) gpu/data/; \
	else echo "no $(GPU_ARCHIVE): put cifar10-jpeg.tar.xz (train/ and test/ folders of JPEGs) into gpu/data/"; fi
	@du -sh gpu/wheels gpu/data

gpu-check:  ## on a GPU machine (no network): install gpu/wheels, then benchmark, train and analyse within BUDGET s
	@ls gpu/wheels/*.whl >/dev/null 2>&1 || \
		{ echo "error: no wheels in gpu/wheels: run make gpu-wheels first" >&2; exit 2; }
	$(GPU_PYTHON) -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target gpu/site gpu/wheels/*.whl
	PYTHONPATH=src:gpu/site $(GPU_PYTHON) scripts/gpu_check.py --budget $(strip $(BUDGET)) \
		$(if $(strip $(GPU_OUT)),--out $(strip $(GPU_OUT))) $(ARGS)

test: lint  ## check the style, then run the tests that take seconds (6-21 min on 2 cores)
	$(PY) -m pytest -q -m "not slow"

test-slow: $(STAMP)  ## the tests that train for tens of seconds or more: ladders, DDP, resume, compile (CI runs them)
	$(PY) -m pytest -q -m slow

# make test-floors: a venv of its own with the lowest versions pyproject.toml allows, pinned by constraints made from
# its >= bounds (devtools/floors.py), so they cannot drift apart; torch and torchvision: the newest the ranges allow.
$(FLOORS_STAMP): pyproject.toml
	test -x $(FLOORS_PY) || $(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_PY) -m pip install --quiet --upgrade pip
	PYTHONPATH=src $(PYTHON) -m vitladder.devtools.floors > $(FLOORS_VENV)/floors.txt
	$(FLOORS_PY) -m pip install --quiet -c $(FLOORS_VENV)/floors.txt -e '.[test]'
	touch $(FLOORS_STAMP)

test-floors: $(FLOORS_STAMP)  ## the fast tests of the libraries' uses and a smoke rung, at pyproject.toml's floors
	$(FLOORS_PY) -m pip check  # the constraints installed every floor exactly, or pip refused
	@echo "floors: $$(tr '\n' ' ' < $(FLOORS_VENV)/floors.txt)"
	$(FLOORS_PY) -m pytest -q -m "not slow" $(FLOORS_TESTS)
	rm -rf $(FLOORS_VENV)/outputs
	$(FLOORS_PY) train.py step=epochs200 profile=smoke wandb.mode=offline output_root=$(FLOORS_VENV)/outputs \
		trainer.enable_progress_bar=false

lint: $(STAMP)  ## ruff: lint and formatting, as configured in pyproject.toml (part of make test)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)  ## apply ruff's fixes and formatting to the whole tree
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

$(MUTATION_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,mutation]'
	touch $(MUTATION_STAMP)

mutation: $(MUTATION_STAMP)  ## mutation testing of the code that computes the numbers (hours; not in make test)
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children $(strip $(JOBS))
	$(PY) scripts/mutation_summary.py

clean-venv:  ## remove the virtual environment
	rm -rf $(VENV)
