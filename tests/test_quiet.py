"""Quiet runs: each library note is dropped by its message and the module that issues it, nothing else is,
and a warning is one line. (A whole run's output is checked in tests/test_extension_points.py.)"""

from __future__ import annotations

import logging
import warnings

import lightning as L
import pytest

from vitladder.cli import LIGHTNING_INFO, one_line, quiet_libraries

LIGHTNING, FIT_LOOP = "lightning.pytorch", "lightning.pytorch.loops.fit_loop"
CHECKPOINT = "lightning.pytorch.callbacks.model_checkpoint"
NOT_EMPTY = "Checkpoint directory r/checkpoints exists and is not empty."
LEAF_SPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."
RESULT = "lightning.pytorch.trainer.connectors.logger_connector.result"


def sync_advice(key: str) -> str:
    """Lightning's advice on several processes for a value logged at epoch level without sync_dist."""
    return (
        f"It is recommended to use `self.log({key!r}, ..., sync_dist=True)` when logging on epoch level in distributed"
        " setting to accumulate the metric across devices."
    )


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_libraries()
        yield shown


@pytest.mark.parametrize(
    "message, category, module, dropped",
    [
        (LEAF_SPEC, FutureWarning, f"{LIGHTNING}.utilities._pytree", True),
        (LEAF_SPEC, FutureWarning, "my_project.trees", False),  # someone else's use of it is theirs to see
        (NOT_EMPTY, UserWarning, CHECKPOINT, True),
        ("The number of training batches (3) is smaller than the logging interval", UserWarning, FIT_LOOP, False),
        (NOT_EMPTY, UserWarning, "my_project.save", False),
        # only rank 0 logs the epoch axis and the tracking (rank_zero_only=True): there is nothing to sync
        (sync_advice("epoch"), UserWarning, RESULT, True),
        (sync_advice("track/layer0/distance_px"), UserWarning, RESULT, True),
        (sync_advice("val/acc"), UserWarning, RESULT, False),  # a value every rank logs: the advice may be right
        (sync_advice("epoch_loss"), UserWarning, RESULT, False),
    ],
)
def test_a_note_is_dropped_only_from_the_module_that_issues_it(quiet, message, category, module, dropped):
    warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 1, module=module)
    assert [str(w.message) for w in quiet] == ([] if dropped else [message])


def test_lightnings_tips_are_dropped_and_its_other_lines_kept(quiet):
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger(LIGHTNING_INFO)
    level, disabled = logger.level, logger.disabled  # an earlier test may have quietened Lightning's loggers
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled
    assert any(line.startswith("GPU available") for line in seen) and not [s for s in seen if "Tip" in s], seen


def test_a_warning_is_one_line(quiet):
    from vitladder import cli as ours

    assert one_line("W&B server\nanswered HTTP 500", UserWarning, ours.__file__, 9) == (
        "warning: W&B server answered HTTP 500\n"
    )
    assert one_line(UserWarning("a\n  b"), UserWarning, "/lib/torch/x.py", 3) == "/lib/torch/x.py:3: UserWarning: a b\n"
    assert warnings.formatwarning is one_line
