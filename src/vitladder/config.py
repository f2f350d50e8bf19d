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


def rung_index(rung: str) -> int | None:
    """The rung's position in RUNGS (0 = patch8): the order to sort rungs by in tables and charts."""
    return RUNGS.index(rung) if rung in RUNGS else None


def check_rung(rung: str) -> str:
    if rung not in RUNGS:
        raise UserError(f"unknown rung '{rung}': choose one of {', '.join(RUNGS)}")
    return rung


def is_step_override(override: str) -> bool:
    """Whether a command-line override picks the rung: `+step=patch8`, `step=augment`, `~step`."""
    return override.partition("=")[0].lstrip("+~") == "step"


def _leaves(node: object, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        leaves: dict[str, object] = {}
        for key, value in node.items():
            leaves.update(_leaves(value, f"{prefix}{key}."))
        return leaves
    return {prefix[:-1]: node}


def check_types(cfg: DictConfig) -> None:
    """A number or switch of the base config given as something else (`trainer.max_epochs=abc`) is
    a one-line error here rather than a traceback deep in training."""
    base = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"), resolve=False)
    base.pop("defaults", None)
    base.pop("hydra", None)
    for key, default in _leaves(base).items():
        if not isinstance(default, (bool, int, float)):
            continue  # strings, lists and nulls take anything
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if value is None:
            continue
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and (isinstance(value, int) or not isinstance(default, int) or float(value).is_integer())
        if not ok:
            kind = "true or false" if isinstance(default, bool) else "an integer" if isinstance(default, int) else "a number"
            example = str(default).lower() if isinstance(default, bool) else default
            raise UserError(f"{key}={value!r} is not valid: {key} takes {kind}, e.g. {key}={example}")


def compose_rung(rung: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config `python train.py +step=<rung> <overrides>` would run, composed in-process."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    register_resolvers()
    check_rung(rung)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"+step={rung}", *overrides])
    except OverrideParseException as error:
        raise UserError(
            f"malformed override {error.override!r} ({error.message.strip().splitlines()[0]}): write key=value, "
            "quoting a value with spaces or brackets, e.g. 'data.root=\"/data/my cifar\"'"
        ) from None
    except (HydraException, OmegaConfBaseException) as error:
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        hint = next((line for line in lines if line.startswith("To append")), "")
        if any(line.startswith("Available options") for line in lines):
            start = next(i for i, line in enumerate(lines) if line.startswith("Available options"))
            options = [line for line in lines[start + 1 :] if " " not in line]
            hint = f"choose one of {', '.join(options)}"
        raise UserError(f"{lines[0].rstrip('.')}{': ' + hint if hint else ''} (overrides: {' '.join(overrides)})") from None
    check_types(cfg)
    return cfg


def scaled_epochs(cfg: DictConfig) -> tuple[int, float]:
    """(max_epochs, warmup_epochs) after the profile's epoch_scale (smoke trains 1% of them)."""
    scale = float(cfg.profile.epoch_scale)
    max_epochs = max(1, round(int(cfg.trainer.max_epochs) * scale))
    warmup_epochs = float(cfg.optim.warmup_epochs) * scale
    return max_epochs, warmup_epochs
