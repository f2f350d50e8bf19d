"""Configs for training tests: the smoke profile on a small synthetic set, writing under tmp_path."""

from __future__ import annotations

import pytest
from tiny_data import tiny_data

from vitladder.config import compose_rung

TINY_DATA = tiny_data(num_train=1200, num_test=200, val_size=200, batch_size=64)


@pytest.fixture
def tiny_cfg(tmp_path):
    """compose_rung for a CPU-second run: smoke width, tiny synthetic data, no progress bar."""

    def make(rung: str, *overrides: str):
        return compose_rung(
            rung,
            ["profile=smoke", *TINY_DATA, f"output_root={tmp_path}", "trainer.enable_progress_bar=false", *overrides],
        )

    return make
