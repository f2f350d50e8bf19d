"""Load any model the training wrote, and the test images its run was evaluated on: a run folder
(``<run>/checkpoints/model.safetensors``, else an older version's ``model.pt``, else ``last.ckpt``), a final model file
or a Lightning checkpoint. Anything else raises a one-line ``CheckpointError`` naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from vitladder.analysis.outputs import history_rows
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.data.stats import ChannelStats
from vitladder.errors import CheckpointError, UserError
from vitladder.model import ViTConfig, build_vit, vit_config_from_dict
from vitladder.run_folder import MODEL_FORMAT, RunPaths, checkpoint_of, run_folder_of
from vitladder.safe_load import load_checkpoint_file


@dataclass
class LoadedModel:
    """What is known about a loaded model besides its weights."""

    path: Path  # the checkpoint file read
    vit_config: ViTConfig
    run_dir: Path | None  # the run folder it belongs to, when it sits in one
    rung: str | None = None
    ladder: str | None = None
    classes: tuple[str, ...] | None = None
    history: list[dict] = field(default_factory=list)  # the callback's tracked values (Lightning only)
    stats: ChannelStats = field(kw_only=True)  # what its inputs are normalised with


def find_checkpoint(path: str | Path) -> Path:
    """The checkpoint file for ``path``: itself, or a run folder's final model (else last.ckpt)."""
    path = Path(path)
    if path.is_dir():
        if (found := checkpoint_of(path)) is not None:
            return found
        raise CheckpointError(f"{path}: no checkpoints/model.safetensors or checkpoints/last.ckpt in this folder")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file or run folder")
    return path


def _vit_config(ckpt: Path, raw: object) -> ViTConfig:
    """The checkpoint's network shape, bounded before anything is allocated for it."""
    try:
        return vit_config_from_dict(raw)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{ckpt}: not a model this project can load ({error})") from None


def _history(data: dict) -> list[dict]:
    """The callback's tracked values, from rows of numbers only (the file may come from anyone)."""
    callbacks = data.get("callbacks")
    for state in callbacks.values() if isinstance(callbacks, dict) else ():
        if isinstance(state, dict) and isinstance(state.get("history"), list):
            try:  # type() and not isinstance(): a bool is no number here
                rows = (
                    r for r in state["history"] if isinstance(r, dict) and {type(v) for v in r.values()} <= {int, float}
                )
                return history_rows(rows)
            except (TypeError, ValueError, OverflowError):  # e.g. a layer that is no integer
                return []
    return []


def _classes(value: object) -> tuple[str, ...] | None:
    if value and (not isinstance(value, (list, tuple)) or not all(isinstance(name, str) for name in value)):
        raise TypeError("classes is not a list of names")
    return tuple(value) if value else None


def load_model(path: str | Path) -> tuple[nn.Module, LoadedModel]:
    """(the ViT in eval mode on the CPU, what is known about it) for a run folder or checkpoint file: a final model
    (``MODEL_FORMAT``) or a Lightning checkpoint (the ViT's weights under ``model.``, with ``_orig_mod.`` from a
    compiled model)."""
    ckpt = find_checkpoint(path)
    data = load_checkpoint_file(ckpt, "give a run folder or its checkpoints/model.safetensors")  # no code run
    if not isinstance(data, dict):
        raise CheckpointError(f"{ckpt}: not a checkpoint this project wrote (a {type(data).__name__}, not a dict)")
    final = data.get("format") == MODEL_FORMAT
    if not final and not ("state_dict" in data and "hyper_parameters" in data):
        raise CheckpointError(
            f"{ckpt}: not a checkpoint this project wrote (no {MODEL_FORMAT} format or Lightning state)"
        )
    rung, ladder = (data.get(key) if final and isinstance(data.get(key), str) else None for key in ("rung", "ladder"))
    try:
        hparams = data if final else data["hyper_parameters"]
        meta = LoadedModel(
            ckpt,
            _vit_config(ckpt, hparams["vit_config" if final else "model"]),
            run_folder_of(ckpt),
            rung,
            ladder,
            _classes(data.get("classes")) if final else None,
            history=[] if final else _history(data),
            # A file from before the statistics travelled with the model: every source was normalised with CIFAR-10's.
            stats=CIFAR10_STATS if (stats := hparams.get("normalization")) is None else ChannelStats.from_dict(stats),
        )
        prefix = "" if final else "model."
        state_dict = {
            k[len(prefix) :].replace("_orig_mod.", ""): v for k, v in data["state_dict"].items() if k.startswith(prefix)
        }
        model = build_vit(meta.vit_config)
        model.load_state_dict(state_dict)
    except (KeyError, TypeError, AttributeError, ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{ckpt}: does not hold this project's ViT ({first[:160]})") from None
    return model.eval(), meta


def load_run_config(meta: LoadedModel, overrides: Sequence[str] = ()) -> DictConfig:
    """The run's config.yaml with ``key=value`` overrides; without a run folder, the rung composed afresh."""
    if meta.run_dir is not None:
        cfg = OmegaConf.load(RunPaths(meta.run_dir).config)
        try:
            return OmegaConf.merge(cfg, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
        except Exception as error:
            raise UserError(f"bad override in {list(overrides)}: {str(error).splitlines()[0]}") from None
    if meta.rung is None:
        raise UserError(f"{meta.path} sits in no run folder (no config.yaml) and names no rung: pass a run folder")
    from vitladder.config import compose_rung

    return compose_rung(meta.rung, overrides)


def test_split(cfg: DictConfig) -> tuple[Tensor, Tensor, tuple[str, ...]]:
    """The run's test split, in the same order as in training: (images uint8, labels, classes)."""
    from vitladder.data import sources
    from vitladder.data.datamodule import split_train_val_test

    data = cfg.data
    splits = sources.load(data)
    _, _, test = split_train_val_test(
        splits,
        val_size=int(data.val_size),
        split_seed=int(data.split_seed),
        train_subset=data.train_subset,
        test_subset=data.test_subset,
    )
    return test.images, test.labels, tuple(splits.classes)
