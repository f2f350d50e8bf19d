# Every target sets up .venv from pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MUTATION_STAMP := $(VENV)/.installed-mutation

PROFILE ?= full        # full: the GPU recipe; smoke: a CPU-sized run of every rung
DATA ?=                # cifar10 | synthetic | imagefolder | a folder or .tar(.xz) archive of train/ and test/
SEEDS ?= 0             # e.g. 0,1,2: every rung once per seed
LADDER ?=              # name of the ladder folder under outputs/ (default: the profile's name)
ARGS ?=                # more Hydra overrides, e.g. ARGS="trainer.devices=2"
CONFIRM_LONG ?=        # 1: train even when the ladder's estimate is beyond a day (the full recipe on a CPU)
RUN ?= outputs/full/epochs200  # make demo: the run folder (or checkpoint) to export
JOBS ?= 2              # make mutation: mutants tested at once

# make mutation: every function of the files in pyproject's [tool.mutmut] only_mutate, except that of
# training/run.py only the ones that build the module and trainer and write the final files.
MUTANTS := 'vitladder.analysis.*' 'vitladder.data.*' 'vitladder.training.module.*' \
	$(foreach f,build_module build_trainer save_model train_rung _train_locked is_finished read_summary,\
	'vitladder.training.run.x_$(f)__mutmut_*')

LADDER_DIR = outputs/$(if $(strip $(LADDER)),$(strip $(LADDER)),$(strip $(PROFILE)))
CONFIRM = $(if $(filter 1 yes true,$(strip $(CONFIRM_LONG))),--yes)
LADDER_ARGS = --seeds $(strip $(SEEDS)) --data "$(strip $(DATA))" $(CONFIRM) profile=$(strip $(PROFILE)) \
	$(if $(strip $(LADDER)),ladder=$(strip $(LADDER))) $(ARGS)

.PHONY: help ladder test mutation report demo bench wandb-sync wandb-report clean-venv

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'
	@echo "  variables: PROFILE=full|smoke  DATA=cifar10|synthetic|PATH  SEEDS=0,1,2  LADDER=name  ARGS='overrides'  JOBS=2"

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
	$(VENV)/bin/wandb sync $(LADDER_DIR)/*/wandb/offline-run-* $(LADDER_DIR)/wandb/offline-run-*

wandb-report: $(STAMP)  ## build and save a W&B Report of the ladder (online); prints its address
	$(PY) scripts/wandb_report.py $(LADDER_DIR)

demo: $(STAMP)  ## export the browser demo of RUN (a run folder or checkpoint)
	$(PY) scripts/export_demo.py $(strip $(RUN))

bench: $(STAMP)  ## benchmark the training loop against a bare PyTorch loop; writes outputs/bench.json
	$(PY) scripts/bench.py

test: $(STAMP)  ## run the test suite
	$(PY) -m pytest -q

$(MUTATION_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,mutation]'
	touch $(MUTATION_STAMP)

mutation: $(MUTATION_STAMP)  ## mutation testing of the code that computes the numbers (hours; not in make test)
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children $(strip $(JOBS)) $(MUTANTS)
	$(PY) scripts/mutation_summary.py $(MUTANTS)

clean-venv:  ## remove the virtual environment
	rm -rf $(VENV)
