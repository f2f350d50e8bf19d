"""Hydra overrides for tiny synthetic data sets: runs of CPU seconds that still touch every part of a rung.

Every test that trains imports its data overrides from here (``pythonpath = ["tests"]`` in pyproject.toml),
so a change to the data keys is one edit.
"""

from __future__ import annotations


def tiny_data(num_train: int, num_test: int, val_size: int, batch_size: int | None = None) -> list[str]:
    """The synthetic source generated at these sizes, every image used (no subsets); the split's
    training part is ``num_train - val_size`` images."""
    overrides = [
        "data=synthetic",
        f"data.num_train={num_train}",
        f"data.num_test={num_test}",
        f"data.val_size={val_size}",
        "data.train_subset=null",
        "data.test_subset=null",
    ]
    return overrides + ([f"data.batch_size={batch_size}"] if batch_size is not None else [])
