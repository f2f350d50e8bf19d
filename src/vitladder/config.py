"""Where the Hydra configs live, the ladder's rungs, and composing a rung's config in code."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from vitladder.errors import UserError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

# The ladder, bottom to top; each rung's YAML in conf/step/ builds on the one before it.
RUNGS: tuple[str, ...] = (
    "patch8",
    "augment",
    "patch4",
    "warmup",
    "label_smoothing",
    "mixup_cutmix",
    "stochastic_depth",
    "epochs200",
)


def seed_suffix(seed: int) -> str:
    """Seed 0 trains into outputs/<ladder>/<rung>/, any other seed into <rung>-seed<k>/."""
    return "" if int(seed) == 0 else f"-seed{int(seed)}"


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("seed_suffix"):
        OmegaConf.register_new_resolver("seed_suffix", seed_suffix)


def check_rung(rung: str) -> str:
    if rung not in RUNGS:
        raise UserError(f"unknown rung '{rung}': choose one of {', '.join(RUNGS)}")
    return rung


def compose_rung(rung: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config `python train.py +step=<rung> <overrides>` would run, composed in-process."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_resolvers()
    check_rung(rung)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=[f"+step={rung}", *overrides])
    except (HydraException, OmegaConfBaseException) as error:
        first_line = str(error).strip().splitlines()[0]
        raise UserError(f"bad override in {list(overrides)}: {first_line}") from None


def scaled_epochs(cfg: DictConfig) -> tuple[int, float]:
    """(max_epochs, warmup_epochs) after the profile's epoch_scale (smoke trains 1% of them)."""
    scale = float(cfg.profile.epoch_scale)
    max_epochs = max(1, round(int(cfg.trainer.max_epochs) * scale))
    warmup_epochs = float(cfg.optim.warmup_epochs) * scale
    return max_epochs, warmup_epochs
