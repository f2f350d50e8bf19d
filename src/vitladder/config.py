"""Where the Hydra configs live, the ladder's rungs, composing a rung's config in code, and the checks
the schema (config_schema.py) cannot make."""

from __future__ import annotations

import functools
import pkgutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from vitladder.config_errors import explain
from vitladder.config_schema import Config, DataConfig, data_schemas, register_schema, valid_values
from vitladder.cuda_choices import cuda_choices
from vitladder.errors import UserError
from vitladder.run_folder import seed_suffix
from vitladder.rungs import Rung, read_ladder

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# analysis.probes' modules (analysis/probes/__init__.py): their names are read from the folder, not imported
PROBES_DIR = Path(__file__).resolve().parent / "analysis" / "probes"

register_schema(CONF_DIR)  # conf/config.yaml's `- schema` default: registered by importing this module, as Hydra does


def scale_epochs(epochs: int, scale: float) -> int:
    """trainer.max_epochs: the recipe's optim.epochs times the profile's epoch_scale, at least 1."""
    return max(1, round(int(epochs) * float(scale)))


def auto_precision(accelerator: str = "auto", rehearse_cuda: bool = False) -> str:
    """trainer.precision's default, for the accelerator the run asks for (cuda_choices.py)."""
    return cuda_choices(accelerator, rehearse_cuda).precision


def rung_lines() -> str:
    """`python train.py --help`'s list of the rungs (conf/hydra/help/vitladder.yaml): name and description."""
    return "\n".join(f"  {rung.name:<17} {rung.description}" for rung in ladder())


def register_resolvers() -> None:
    for name, resolver in (
        ("seed_suffix", seed_suffix),
        ("scale_epochs", scale_epochs),
        ("auto_precision", auto_precision),
        ("rung_lines", rung_lines),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


@functools.cache
def ladder() -> tuple[Rung, ...]:
    """The ladder's rungs, bottom to top, as conf/step/ declares them (vitladder.rungs); read once."""
    return read_ladder(CONF_DIR / "step")


def rung_names() -> tuple[str, ...]:
    """The rungs' names in ladder order (patch8 first)."""
    return tuple(rung.name for rung in ladder())


def get_rung(rung: str) -> Rung:
    """A rung's description and reference figures (an unknown rung: the UserError of check_rung)."""
    return next(r for r in ladder() if r.name == check_rung(rung))


def rung_index(rung: str) -> int | None:
    """The rung's position in the ladder (0 = the first rung): the order to sort rungs by in tables and charts."""
    return rung_names().index(rung) if rung in rung_names() else None


def check_rung(rung: str) -> str:
    if rung not in rung_names():
        raise UserError(f"unknown rung '{rung}': choose one of {', '.join(rung_names())}")
    return rung


def is_step_override(override: str) -> bool:
    """Whether a command-line override picks the rung: `step=augment`, `+step=patch8`, `~step`."""
    return override.partition("=")[0].lstrip("+~") == "step"


def accept_plus_step(overrides: Sequence[str]) -> list[str]:
    """`+step=<rung>` as `step=<rung>`. conf/config.yaml lists `step: null`, so Hydra's form is
    `step=<rung>`; Hydra refuses `+` on a group already in the defaults list, and `+step=` is what
    earlier versions of this project (and many Hydra projects) document."""
    return [
        override.lstrip("+") if override.startswith("+") and is_step_override(override) else override
        for override in overrides
    ]


def compose_rung(rung: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config `python train.py step=<rung> <overrides>` would run, composed in-process and validated."""
    check_rung(rung)
    return compose_config([f"step={rung}", *overrides])


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """conf/config.yaml with command-line overrides, as Hydra composes it for train.py; a mistake is one
    UserError line (config_errors.py) rather than Hydra's report."""
    register_schema(CONF_DIR)  # again: a source module added since this process started is a data= option too
    overrides = accept_plus_step(overrides)
    try:
        cfg = compose_unchecked(overrides)
    except Exception as error:
        raise explain(error, overrides, compose_unchecked) from None
    validate(cfg, overrides)
    return cfg


def compose_unchecked(overrides: Sequence[str]) -> DictConfig:
    """conf/config.yaml with `overrides`, as Hydra composes it, before validate's checks."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@functools.cache
def base_values(source: str) -> dict[str, Any]:
    """conf/config.yaml with data=<source> and nothing else (no rung, no command line), resolved: what each key
    is before anything chooses it. Inside train.py's Hydra app, Hydra is set up already, on the same conf/."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    register_resolvers()
    overrides = [f"data={source}"]
    if GlobalHydra.instance().is_initialized():
        return OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)
    return OmegaConf.to_container(compose_unchecked(overrides), resolve=True)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: {"optim.lr": 0.001, ...}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def validate(cfg: DictConfig, overrides: Sequence[str] = ()) -> None:
    """What the schema's types cannot say, checked before anything is written: keys Hydra force-added
    with `+`, values left unset, and ranges. Raises a one-line UserError."""
    try:
        # Hydra adds a `+key=value` with OmegaConf's force_add, past the schema: merging the plain values
        # into the schema again refuses a key it does not declare.
        schema = OmegaConf.structured(Config)
        schema.data = OmegaConf.structured(OmegaConf.get_type(cfg, "data"))
        OmegaConf.merge(schema, OmegaConf.to_container(cfg))
    except OmegaConfBaseException as error:
        raise explain(error, overrides, compose_unchecked) from None
    try:
        errors = range_errors(cfg)  # first: they need no torch import (trainer.precision's resolver does)
    except OmegaConfBaseException as error:
        raise explain(error, overrides, compose_unchecked) from None
    if errors:
        raise UserError(errors[0])
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(f"{missing[0]} has no value: give one on the command line, {missing[0]}=...")
    try:
        OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves, to a value of its type
    except OmegaConfBaseException as error:
        raise explain(error, overrides, compose_unchecked) from None


_ABSENT = object()


def range_errors(cfg: DictConfig) -> list[str]:
    """One message per value out of the range its schema field declares (the chosen data source's keys
    included), then the rules across keys."""
    source = data_schemas().get(OmegaConf.select(cfg, "data.source", default=None), DataConfig)
    errors = []
    for key, in_range, what, example in valid_values(source):
        try:
            value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=True)
        except MissingMandatoryValue:
            continue  # validate reports it as missing
        if value is not _ABSENT and not in_range(value):
            shown = repr(value) if isinstance(value, str) else "null" if value is None else value
            errors.append(f"{key}={shown} is not valid: {key} must be {what}, e.g. {key}={example}")
    probes = sorted(info.name for info in pkgutil.iter_modules([str(PROBES_DIR)]) if not info.name.startswith("_"))
    unknown = [name for name in OmegaConf.select(cfg, "analysis.probes", default=None) or () if name not in probes]
    if unknown:
        errors.append(f"analysis.probes: no probe '{unknown[0]}': choose from {', '.join(probes)}")
    if cfg.model.num_heads >= 1 and cfg.model.embed_dim % cfg.model.num_heads:
        errors.append(
            f"model.embed_dim={cfg.model.embed_dim} is not valid: it must be a multiple of "
            f"model.num_heads={cfg.model.num_heads}, e.g. model.embed_dim={64 * cfg.model.num_heads}"
        )
    return errors


def scaled_epochs(cfg: DictConfig) -> tuple[int, float]:
    """(max_epochs, warmup_epochs) as trained: trainer.max_epochs (optim.epochs after the profile's
    epoch_scale, or set directly) and optim.warmup_epochs after the same scale (smoke trains 1% of them)."""
    return int(cfg.trainer.max_epochs), float(cfg.optim.warmup_epochs) * float(cfg.profile.epoch_scale)
