"""The config's keys, declared once as Hydra structured configs (conf/ holds the values; MISSING: set there).
OmegaConf refuses an unknown key or a wrong type; :func:`setting` adds the valid values (config.validate checks
them) and whether the key is in the recipe (training/recipe.py)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import Field, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

WANDB_MODES = ("auto", "online", "offline", "disabled")
WANDB_ALIASES = ("dryrun", "run", "shared")  # wandb's own older names, passed through to it
MAX_SEED = 2**32 - 1  # numpy's and Lightning's seed range

# A key's valid values: in range?, the range in words, an example value (config.check_values).
Valid = tuple[Callable[[Any], bool], str, str]


def setting(default: Any = MISSING, *, valid: Valid | None = None, in_recipe: bool = True) -> Any:
    """A schema field: its default, its valid values, and whether it is in the recipe (False for a key that changes
    no result, such as a cache folder or the W&B project)."""
    default_is = "default_factory" if callable(default) else "default"  # a block's class or dict: one per instance
    return field(metadata={"valid": valid, "in_recipe": in_recipe}, **{default_is: default})


def at_least(low: float, example: str, words: str = "") -> Valid:
    return (lambda v: v >= low, words or f"at least {low:g}", example)


def above(low: float, example: str) -> Valid:
    return (lambda v: v > low, f"above {low:g}", example)


FRACTION: Valid = (lambda v: 0 <= v < 1, "in [0, 1)", "0.1")
COUNT_OR_ALL: Valid = (lambda v: v is None or v >= 1, "at least 1, or null for every image", "null")


@dataclass
class ModelConfig:
    # That the patch size divides the image size is checked once the data are loaded (training.run.check_patch_size).
    patch_size: int = setting(valid=at_least(1, "4"))
    embed_dim: int = MISSING
    depth: int = setting(valid=at_least(1, "7"))
    num_heads: int = setting(valid=at_least(1, "6"))
    mlp_ratio: float = MISSING
    drop_path_rate: float = setting(valid=FRACTION)


@dataclass
class DataConfig:
    """What every data source shares (the `data:` block of conf/config.yaml)."""

    source: str = MISSING
    batch_size: int = setting(valid=at_least(1, "64"))
    eval_batch_size: int = setting(valid=at_least(1, "1000"), in_recipe=False)  # evaluation batches change no result
    val_size: int = setting(valid=at_least(0, "5000", "at least 0 (0: no validation, every training image trains)"))
    split_seed: int = MISSING
    train_subset: int | None = setting(valid=COUNT_OR_ALL)
    test_subset: int | None = setting(valid=COUNT_OR_ALL)
    random_crop_padding: int = MISSING
    horizontal_flip: bool = MISSING


@dataclass
class OptimConfig:
    epochs: int = setting(valid=at_least(1, "100"))  # the recipe's; trainer.max_epochs is this × profile.epoch_scale
    lr: float = setting(valid=above(0, "1e-3"))
    weight_decay: float = MISSING
    betas: list[float] = MISSING
    min_lr: float = MISSING
    warmup_epochs: float = MISSING
    warmup_start_lr: float = MISSING


@dataclass
class LossConfig:
    label_smoothing: float = setting(valid=FRACTION)


@dataclass
class MixupConfig:
    mixup_alpha: float = MISSING
    cutmix_alpha: float = MISSING
    prob: float = MISSING
    switch_prob: float = MISSING


@dataclass
class TrainerConfig:
    """Every `lightning.Trainer` argument but logger, callbacks and plugins, with Lightning's defaults (tests check
    both). A union type (devices, precision, limit_*_batches: int counts, float is a fraction) is Any: OmegaConf
    has no unions, Lightning checks them itself."""

    accelerator: Any = "auto"
    strategy: Any = "auto"
    devices: Any = "auto"
    num_nodes: int = 1
    precision: Any = None
    fast_dev_run: Any = False
    max_epochs: int | None = setting(
        None, valid=(lambda v: v is not None and v >= 1, "at least 1 (the schedule's length)", "100")
    )
    min_epochs: int | None = None
    max_steps: int = -1
    min_steps: int | None = None
    max_time: Any = None
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    limit_predict_batches: Any = None
    overfit_batches: Any = 0.0
    val_check_interval: Any = None
    check_val_every_n_epoch: int | None = 1
    num_sanity_val_steps: int | None = None
    log_every_n_steps: int | None = setting(None, in_recipe=False)
    enable_checkpointing: bool | None = None
    enable_progress_bar: bool | None = setting(None, in_recipe=False)
    enable_model_summary: bool | None = setting(None, in_recipe=False)
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None
    deterministic: Any = None
    benchmark: bool | None = None
    inference_mode: bool = setting(True, in_recipe=False)  # nothing learned
    use_distributed_sampler: bool = True
    profiler: str | None = None
    detect_anomaly: bool = False
    barebones: bool = False
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: int = 0
    default_root_dir: str | None = setting(None, in_recipe=False)
    enable_autolog_hparams: bool = True
    model_registry: str | None = None


@dataclass
class SpeedConfig:
    """The project's speed switches that are not Trainer arguments."""

    compile: bool = MISSING  # torch.compile the model in place
    rehearse_cuda: bool = MISSING  # any device takes the choices of a CUDA GPU (cuda_choices.py): a rehearsal


@dataclass
class CheckpointConfig:
    every_n_epochs: int = setting(valid=at_least(0, "1", "0 (no checkpoint) or more"))  # last.ckpt every N-th epoch
    min_interval_s: float = setting(valid=at_least(0, "60", "0 (every epoch) or more seconds"))  # ...this long apart


@dataclass
class AnalysisConfig:
    enabled: bool = MISSING
    num_images: int = MISSING
    batch_size: int = setting(in_recipe=False)
    example_image: int = MISSING
    track_every_n_epochs: int = MISSING
    track_images: int = MISSING
    probes: list[str] = setting(in_recipe=False)  # modules of analysis/probes/, in this order: they train nothing
    settings: dict[str, Any] = setting(dict, in_recipe=False)  # probe name -> its settings (ablation draws)


@dataclass
class WandbConfig:
    project: str = MISSING
    entity: str | None = MISSING
    mode: str = setting(
        valid=(lambda v: v in (*WANDB_MODES, *WANDB_ALIASES), f"one of {', '.join(WANDB_MODES)}", "offline")
    )


@dataclass
class ProfileConfig:
    name: str = MISSING
    epoch_scale: float = setting(valid=above(0, "0.1"))


@dataclass
class ReferenceFigures:
    """The article's figures for a rung (one seed of its GPU run); none for a rung it did not train."""

    test_acc: float = MISSING  # a fraction, 0.929 for 92.9%
    layer1_distance_px: float = MISSING
    uniform_distance_px: float = MISSING
    epochs: int | None = None  # a result of other epochs says so (report/setting.py)


@dataclass
class RungInfo:
    """What a rung is, not what it trains: outside the recipe (training/recipe.py)."""

    description: str = MISSING  # one line: what the rung adds to the one it builds on
    reference: ReferenceFigures | None = None


@dataclass
class Config:
    rung: str = MISSING
    # Each conf/step/<rung>.yaml adds its own entry, so a rung's config holds the info of every rung it
    # builds on, bottom first; keyed by name, so a rung without reference figures inherits none.
    # Outside the recipe: a reworded description or a new reference figure trains nothing anew.
    rung_info: dict[str, RungInfo] = setting(dict, in_recipe=False)
    ladder: str = setting(
        valid=(
            lambda v: len(v) <= 100 and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) is not None,  # nothing hidden
            "a plain folder name (letters, digits, '.', '_', '-'; no '/')",
            "my-ladder",
        ),
        in_recipe=False,
    )
    seed: int = setting(valid=(lambda v: 0 <= v <= MAX_SEED, f"between 0 and {MAX_SEED}", "1"))
    run_dir: str = setting(in_recipe=False)  # where a run is written and how it is shown and logged: no result
    output_root: str = setting(in_recipe=False)
    overwrite: bool = setting(in_recipe=False)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = MISSING  # the Config of the source chosen by the data group (data_schemas())
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    mixup: MixupConfig = field(default_factory=MixupConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    # speed.* changes kernels, not the recipe (the precision speed.rehearse_cuda implies is in trainer.precision)
    speed: SpeedConfig = setting(SpeedConfig, in_recipe=False)
    checkpoint: CheckpointConfig = setting(CheckpointConfig, in_recipe=False)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    wandb: WandbConfig = setting(WandbConfig, in_recipe=False)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


def data_schemas() -> dict[str, type[DataConfig]]:
    """data=<name> -> its module's ``Config`` (DataConfig if none); reached by name: the sources are a layer above."""
    sources = importlib.import_module("vitladder.data.sources")
    return {name: getattr(sources.source_named(name), "Config", DataConfig) for name in sources.source_names()}


def register_schema(conf_dir: Path) -> None:
    """The schema in Hydra's ConfigStore: `schema`, `schema/data/<name>`, and `data/<name>` (its Config's defaults)
    for a source without a conf/data/<name>.yaml."""
    store = ConfigStore.instance()
    store.store(name="schema", node=Config)
    for name, schema in data_schemas().items():
        store.store(group="schema/data", name=name, node=schema)
        if not (conf_dir / "data" / f"{name}.yaml").is_file():
            store.store(group="data", name=name, node=OmegaConf.merge(schema, {"source": name}))


def schema_fields(
    source: type[DataConfig] | None = None, schema: type = Config, prefix: str = ""
) -> Iterator[tuple[str, Field, Any]]:
    """(dotted key, field, type) for every key and block, outer first; data.* of ``source``, or of every source."""
    hints = get_type_hints(schema)
    for f in fields(schema):
        key, hint = f"{prefix}{f.name}", hints[f.name]
        yield key, f, hint
        blocks = ([source] if source else data_schemas().values()) if key == "data" else [hint]
        for block in filter(is_dataclass, blocks):
            yield from schema_fields(source, block, f"{key}.")


def schema_keys(source: type[DataConfig] | None = None) -> dict[str, Any]:
    return {key: hint for key, _, hint in schema_fields(source) if not is_dataclass(hint)}


def valid_values(source: type[DataConfig]) -> list[tuple[str, Callable[[Any], bool], str, str]]:
    return [(key, *f.metadata["valid"]) for key, f, _ in schema_fields(source) if f.metadata.get("valid")]


def outside_the_recipe() -> tuple[str, ...]:
    return tuple(dict.fromkeys(key for key, f, _ in schema_fields() if not f.metadata.get("in_recipe", True)))
