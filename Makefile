# Every target sets up .venv from pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

PROFILE ?= full        # full: the GPU recipe; smoke: a CPU-sized run of every rung
DATA ?=                # cifar10 | synthetic | imagefolder | a folder or .tar(.xz) archive of train/ and test/
SEEDS ?= 0             # e.g. 0,1,2: every rung once per seed
LADDER ?=              # name of the ladder folder under outputs/ (default: the profile's name)
ARGS ?=                # more Hydra overrides, e.g. ARGS="trainer.devices=2"
RUN ?= outputs/full/epochs200  # make demo: the run folder (or checkpoint) to export

LADDER_DIR = outputs/$(if $(strip $(LADDER)),$(strip $(LADDER)),$(strip $(PROFILE)))
LADDER_ARGS = --seeds $(strip $(SEEDS)) --data "$(strip $(DATA))" profile=$(strip $(PROFILE)) \
	$(if $(strip $(LADDER)),ladder=$(strip $(LADDER))) $(ARGS)

.PHONY: help ladder test report demo bench wandb-sync wandb-report clean-venv

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'
	@echo "  variables: PROFILE=full|smoke  DATA=cifar10|synthetic|PATH  SEEDS=0,1,2  LADDER=name  ARGS='overrides'"

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

clean-venv:  ## remove the virtual environment
	rm -rf $(VENV)
