"""Read a checkpoint someone may have handed in, without ever running code from it: the final model is a
safetensors file (tensors and a header of strings, no pickle); Lightning's last.ckpt (and an older version's
model.pt) is read with `torch.load(weights_only=True)`, which refuses any Python object but tensors and plain data
before building it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from vitladder.errors import CheckpointError


def load_checkpoint_file(path: str | Path, what_to_do: str) -> Any:
    """The checkpoint at ``path`` on the CPU, or a one-line CheckpointError ending in ``what_to_do``."""
    try:
        if Path(path).suffix == ".safetensors":  # as the dict a model.pt held: the header's entries, the tensors
            with safe_open(str(path), framework="pt") as file:
                metadata = {key: json.loads(value) for key, value in (file.metadata() or {}).items()}
                return {**metadata, "state_dict": {key: file.get_tensor(key) for key in file.keys()}}
        with warnings.catch_warnings():  # e.g. torch's note on an unusual pickle protocol: not the user's concern
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch and safetensors raise several types for damaged or foreign files
        if "unsupported global" in str(error).lower():  # a Python object that is not plain data: refused, not run
            raise CheckpointError(
                f"{path}: refused, it holds Python objects other than tensors and plain data (loading them could "
                f"run code); {what_to_do}"
            ) from None
        text = str(error).strip()
        first_line = text.split(". ")[0].splitlines()[0][:120] if text else type(error).__name__
        raise CheckpointError(
            f"{path}: not a readable checkpoint, truncated or not a torch or safetensors file ({first_line}); "
            f"{what_to_do}"
        ) from None
