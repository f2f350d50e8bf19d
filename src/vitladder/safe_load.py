"""Read a checkpoint someone may have handed in, without ever running code from it.

`torch.load(weights_only=True)` unpickles tensors and plain data (dicts, lists, numbers, strings)
only: a file that names any other Python object is refused before the object is built. Every
checkpoint this project writes (model.pt, Lightning's last.ckpt with its RNG streams, callback
state and hyperparameters) is made of such data, so it loads this way.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from vitladder.errors import CheckpointError


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.split(". ")[0].splitlines()[0][:120] if text else type(error).__name__


def load_checkpoint_file(path: str | Path, what_to_do: str) -> Any:
    """The checkpoint at ``path`` on the CPU, or a one-line CheckpointError ending in ``what_to_do``."""
    try:
        with warnings.catch_warnings():  # e.g. torch's note on an unusual pickle protocol: not the user's concern
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for damaged or foreign files
        if "unsupported global" in str(error).lower():  # a Python object that is not plain data: refused, not run
            raise CheckpointError(
                f"{path}: refused, it holds Python objects other than tensors and plain data (loading them could "
                f"run code); {what_to_do}"
            ) from None
        raise CheckpointError(
            f"{path}: not a readable checkpoint, truncated or not a torch file ({_first_line(error)}); {what_to_do}"
        ) from None
