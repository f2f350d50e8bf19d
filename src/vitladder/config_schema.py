"""The shape and types of the config, declared once: Hydra structured configs used as the schema of
conf/config.yaml (Hydra's "static schema with many configs"). The values live in the YAML files.

A field set to MISSING takes its value from conf/; a field with a default here is one the recipe does
not choose (Lightning's own Trainer defaults, the image-folder read cap). OmegaConf checks every
override against this schema: an unknown key, with or without `+`, and a value of the wrong type are
refused at composition, before anything runs. Ranges and cross-field rules are `config.validate`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

DATA_SOURCES = "vitladder.data.sources"  # data=<name> is the module DATA_SOURCES.<name> (data_schemas)


@dataclass
class ModelConfig:
    patch_size: int = MISSING
    embed_dim: int = MISSING
    depth: int = MISSING
    num_heads: int = MISSING
    mlp_ratio: float = MISSING
    drop_path_rate: float = MISSING


# A key's valid values: whether a value is in range, the range in words, an example value (config.range_errors).
Valid = tuple[Callable[[Any], bool], str, str]


def source_key(default: Any = MISSING, *, valid: Valid | None = None, in_recipe: bool = True) -> Any:
    """A field of a data source's ``Config``: its default, its valid values, and whether it is part of the
    recipe (False for a key that changes no result, such as a cache folder; training/recipe.py)."""
    return field(default=default, metadata={"valid": valid, "in_recipe": in_recipe})


def source_ranges(schema: type) -> list[tuple[str, Callable[[Any], bool], str, str]]:
    """(data.<key>, in range, the range in words, an example) for each key of a source's Config that declares one."""
    return [(f"data.{f.name}", *f.metadata["valid"]) for f in fields(schema) if f.metadata.get("valid")]


def keys_outside_the_recipe() -> list[str]:
    """data.<key> for every source key its Config marks outside the recipe (source_key(in_recipe=False))."""
    schemas = data_schemas().values()
    marked = {f.name for schema in schemas for f in fields(schema) if not f.metadata.get("in_recipe", True)}
    return [f"data.{name}" for name in sorted(marked)]


@dataclass
class DataConfig:
    """What every data source shares (the `data:` block of conf/config.yaml)."""

    source: str = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING  # outside the recipe: evaluation batches change no result
    val_size: int = MISSING
    split_seed: int = MISSING
    train_subset: int | None = MISSING
    test_subset: int | None = MISSING
    random_crop_padding: int = MISSING
    horizontal_flip: bool = MISSING


@dataclass
class OptimConfig:
    epochs: int = MISSING  # the recipe's epochs; trainer.max_epochs is this times profile.epoch_scale
    lr: float = MISSING
    weight_decay: float = MISSING
    betas: list[float] = MISSING
    min_lr: float = MISSING
    warmup_epochs: float = MISSING
    warmup_start_lr: float = MISSING


@dataclass
class LossConfig:
    label_smoothing: float = MISSING


@dataclass
class MixupConfig:
    mixup_alpha: float = MISSING
    cutmix_alpha: float = MISSING
    prob: float = MISSING
    switch_prob: float = MISSING


@dataclass
class TrainerConfig:
    """Every argument of `lightning.Trainer` (2.6) except logger, callbacks and plugins, which the run
    supplies; `L.Trainer(**cfg.trainer, ...)`. Defaults are Lightning's (tests/test_config.py checks both
    the names and the defaults against the installed Trainer). Arguments Lightning types as a union
    (`devices`, `precision`, `limit_train_batches`: an int counts batches, a float is a fraction, ...) are
    Any: OmegaConf 2.3 has no union types, so Lightning checks those values itself."""

    accelerator: Any = "auto"
    strategy: Any = "auto"
    devices: Any = "auto"
    num_nodes: int = 1
    precision: Any = None
    fast_dev_run: Any = False
    max_epochs: int | None = None
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
    log_every_n_steps: int | None = None
    enable_checkpointing: bool | None = None
    enable_progress_bar: bool | None = None
    enable_model_summary: bool | None = None
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None
    deterministic: Any = None
    benchmark: bool | None = None
    inference_mode: bool = True
    use_distributed_sampler: bool = True
    profiler: str | None = None
    detect_anomaly: bool = False
    barebones: bool = False
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: int = 0
    default_root_dir: str | None = None
    enable_autolog_hparams: bool = True
    model_registry: str | None = None


@dataclass
class SpeedConfig:
    """The project's speed switches that are not Trainer arguments."""

    compile: bool = MISSING  # torch.compile the model in place
    rehearse_cuda: bool = MISSING  # any device takes the choices of a CUDA GPU (cuda_choices.py): a rehearsal


@dataclass
class CheckpointConfig:
    every_n_epochs: int = MISSING  # last.ckpt after every N-th epoch; 0: none
    min_interval_s: float = MISSING  # ...once this many seconds have passed since the last save


@dataclass
class AnalysisConfig:
    enabled: bool = MISSING
    num_images: int = MISSING
    batch_size: int = MISSING
    example_image: int = MISSING
    track_every_n_epochs: int = MISSING
    track_images: int = MISSING
    probes: list[str] = MISSING  # modules of analysis/probes/, run in this order; outside the recipe
    settings: dict[str, Any] = field(default_factory=dict)  # probe name -> its own settings (e.g. ablation draws)


@dataclass
class WandbConfig:
    project: str = MISSING
    entity: str | None = MISSING
    mode: str = MISSING  # auto, online, offline or disabled (checked by config.validate)


@dataclass
class ProfileConfig:
    name: str = MISSING
    epoch_scale: float = MISSING


@dataclass
class ReferenceFigures:
    """The article's figures for a rung (one seed of its GPU run), and the epochs it trained them in; a rung it did
    not train has none."""

    test_acc: float = MISSING  # a fraction, 0.929 for 92.9%
    layer1_distance_px: float = MISSING
    uniform_distance_px: float = MISSING
    epochs: int | None = None  # the article's training length: a result of other epochs says so (report/setting.py)


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
    rung_info: dict[str, RungInfo] = field(default_factory=dict)
    ladder: str = MISSING
    seed: int = MISSING
    run_dir: str = MISSING
    output_root: str = MISSING
    overwrite: bool = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = MISSING  # the Config of the source chosen by the data group (data_schemas())
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    mixup: MixupConfig = field(default_factory=MixupConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


def data_schemas() -> dict[str, type[DataConfig]]:
    """data=<name> -> the keys and types of that source: its module's ``Config`` (DataConfig when it has no
    keys of its own). The sources build on DataConfig from a layer above this one, so they are reached by their
    package's name when asked (as Hydra reaches a ``_target_``), not imported."""
    sources = importlib.import_module(DATA_SOURCES)
    return {name: getattr(sources.source_named(name), "Config", DataConfig) for name in sources.source_names()}


def register_schema(conf_dir: Path) -> None:
    """Stores the schema in Hydra's ConfigStore: `schema` for config.yaml, `schema/data/<name>` for data/.
    A source without a conf/data/<name>.yaml is a `data` option of its own: its Config's defaults."""
    store = ConfigStore.instance()
    store.store(name="schema", node=Config)
    for name, schema in data_schemas().items():
        store.store(group="schema/data", name=name, node=schema)
        if not (conf_dir / "data" / f"{name}.yaml").is_file():
            node = OmegaConf.structured(schema)
            node.source = name
            store.store(group="data", name=name, node=node)


def schema_keys() -> dict[str, Any]:
    """Every dotted key the schema declares, with its type; data.* holds the keys of every data source."""
    keys: dict[str, Any] = {}

    def walk(schema: type, prefix: str) -> None:
        for name, hint in get_type_hints(schema).items():
            if name == "data" and schema is Config:
                for source in data_schemas().values():
                    walk(source, "data.")
            elif is_dataclass(hint):
                walk(hint, f"{prefix}{name}.")
            else:
                keys[f"{prefix}{name}"] = hint

    walk(Config, "")
    return keys


def data_sources_with(key: str) -> list[str]:
    """The data= options whose schema declares `key` (a name under data.)."""
    return [name for name, schema in data_schemas().items() if key in {f.name for f in fields(schema)}]
