"""W&B reads its environment (WANDB_BASE_URL, WANDB_API_KEY, WANDB_MODE) once per process, when it is first set up:
a test that changes it starts W&B afresh before and after, as a new process would."""

from __future__ import annotations

import pytest


@pytest.fixture
def fresh_wandb(monkeypatch):
    """``monkeypatch``, with W&B set up again from the environment the test gives it (WANDB_MODE unset)."""
    import wandb

    monkeypatch.delenv("WANDB_MODE", raising=False)
    wandb.teardown()
    yield monkeypatch
    wandb.teardown()
