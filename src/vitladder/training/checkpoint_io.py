"""How the Trainer writes and reads last.ckpt: through the project's atomic writer, never unpickling code.

Lightning's default goes through fsspec, which writes into $TMPDIR and moves the file: across file
systems that move is a truncate-and-copy, so a full disk leaves last.ckpt cut short. Here the new
checkpoint is written beside the old one and renamed over it only once it is complete and on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from vitladder.atomic import save_torch
from vitladder.safe_load import load_checkpoint_file
from vitladder.training.resume import RETRAIN


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        save_torch(checkpoint, path)

    def load_checkpoint(
        self, path: Any, map_location: Callable | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        # weights_only whatever the caller asks: a checkpoint file can be handed in by anyone.
        return load_checkpoint_file(path, RETRAIN)
