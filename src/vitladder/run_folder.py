"""A run folder: one rung trained with one seed, its file layout and the rule that it is finished.

    <output_root>/<ladder>/<rung>/            seed 0
    <output_root>/<ladder>/<rung>-seed<k>/    any other seed
        config.yaml, overrides.yaml           the resolved config and the command line's overrides
        provenance.json                       what made it: versions, and every key's default then
        metrics.csv                           per-epoch metrics (EPOCH) and per-step lr (LR)
        checkpoints/last.ckpt                 Lightning's resumable state
        checkpoints/model.safetensors         the final model, loadable without Lightning (MODEL_FORMAT; a run
                                              of an older version wrote checkpoints/model.pt, still read)
        analysis/<table>.csv, <figure>.png   each probe's (analysis.probes): heads.csv, layers.csv, ...
        done.json                             written last: its presence means the rung is finished

Every reader and writer of run folders takes its names from here (docs/design.md §5: the same, for people)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

MODEL_FORMAT = "vitladder-model/1"  # the final model's "format" entry; bump it when its keys change
# The axes of metrics.csv and of the W&B runs: epochs trained (0: the model at initialisation), per optimizer step.
EPOCH, LR = "epoch", "lr"
TRACK = "track/"  # the logged name of a value tracked during training: track/<name>, against epoch
_RUN_NAME = re.compile(r"^(?P<rung>[a-z0-9_]+?)(?:-seed(?P<seed>\d+))?$")


def seed_suffix(seed: int) -> str:
    """Seed 0 trains into <rung>/, any other seed into <rung>-seed<k>/."""
    return "" if int(seed) == 0 else f"-seed{int(seed)}"


def parse_run_name(name: str) -> tuple[str, int] | None:
    """(rung, seed) of a run folder's name, or None when the name is not one."""
    match = _RUN_NAME.match(name)
    return (match["rung"], int(match["seed"] or 0)) if match else None


class RunPaths:
    """Where each file of the run folder ``root`` lives."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "config.yaml"
        self.overrides = self.root / "overrides.yaml"
        self.provenance = self.root / "provenance.json"
        self.metrics_csv = self.root / "metrics.csv"
        self.checkpoints = self.root / "checkpoints"
        self.analysis = self.root / "analysis"
        self.done = self.root / "done.json"
        self.last_ckpt = self.checkpoints / "last.ckpt"
        self.model = self.checkpoints / "model.safetensors"
        self.model_pt = self.checkpoints / "model.pt"  # the final model of the versions before model.safetensors
        self.layers_csv = self.analysis / "layers.csv"  # the attention probe's table: the report's by-layer figures


def rounded(value: object) -> object:
    """A float to 6 decimals (every CSV, done.json and W&B table); anything else as it is."""
    return round(value, 6) if isinstance(value, float) else value


def table_columns(rows: Sequence[Mapping]) -> list[str]:
    """Every key of the rows, in first-seen order (a row may lack a column: an empty cell)."""
    return list(dict.fromkeys(key for row in rows for key in row))


def is_finished(run_dir: str | Path) -> bool:  # done.json is written last
    return RunPaths(run_dir).done.is_file()


def read_summary(run_dir: str | Path) -> dict:
    return json.loads(RunPaths(run_dir).done.read_text())


def final_model(path: str | Path) -> Path | None:
    """A finished run folder's model: model.safetensors, else an older version's model.pt; None if neither."""
    paths = RunPaths(path)
    return next((model for model in (paths.model, paths.model_pt) if model.is_file()), None)


def checkpoint_of(path: str | Path) -> Path | None:
    """A run folder's final model, else its last.ckpt; None if neither."""
    last = RunPaths(path).last_ckpt
    return final_model(path) or (last if last.is_file() else None)


def run_folder_of(checkpoint: Path) -> Path | None:
    """The run folder a checkpoint file sits in (checkpoints/<file>), or None outside one."""
    root = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    return root if RunPaths(root).config.is_file() else None
