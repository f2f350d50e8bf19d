"""A run's config: conf/ composed as train.py's Hydra composes it, checked against what the schema
(config_schema.py) declares, and each mistake said in one line (Hydra's and OmegaConf's reports take several);
and the ladder, read from conf/step/ alone."""

from __future__ import annotations

import contextlib
import difflib
import functools
import pkgutil
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf import DictConfig, ListConfig, MissingMandatoryValue, OmegaConf, ValidationError
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from vitladder.config_schema import Config, RungInfo, data_schemas, register_schema, schema_keys, valid_values
from vitladder.cuda_choices import cuda_choices
from vitladder.errors import UserError
from vitladder.run_folder import seed_suffix

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PROBES_DIR = Path(__file__).resolve().parent / "analysis" / "probes"  # analysis.probes' names: its modules' files

register_schema(CONF_DIR)  # conf/config.yaml's `- schema` default: registered by importing this module, as Hydra does


def scale_epochs(epochs: int, scale: float) -> int:
    """trainer.max_epochs: the recipe's optim.epochs times the profile's epoch_scale, at least 1."""
    return max(1, round(int(epochs) * float(scale)))


def scaled_epochs(cfg: DictConfig) -> tuple[int, float]:
    """(max_epochs, warmup_epochs) as trained: trainer.max_epochs and optim.warmup_epochs after the profile's scale."""
    return int(cfg.trainer.max_epochs), float(cfg.optim.warmup_epochs) * float(cfg.profile.epoch_scale)


# conf/config.yaml's resolvers (for train.py's Hydra or compose_unchecked): auto_precision is trainer.precision's
# default, rung_lines lists the ladder in `python train.py --help`.
OmegaConf.register_new_resolver("seed_suffix", seed_suffix, replace=True)
OmegaConf.register_new_resolver("scale_epochs", scale_epochs, replace=True)
OmegaConf.register_new_resolver(
    "auto_precision", lambda accelerator, rehearse: cuda_choices(accelerator, rehearse).precision, replace=True
)
OmegaConf.register_new_resolver(
    "rung_lines", lambda: "\n".join(f"  {rung.name:<17} {rung.description}" for rung in ladder()), replace=True
)


# --- the ladder: one conf/step/<rung>.yaml per rung holds its delta, its `rung_info` (a one-line description, the
# article's reference figures where there are any) and, in its Hydra `defaults`, the rung it builds on. The ladder
# is the chain from the one rung without a parent, so adding a rung is adding a file.


@dataclass(frozen=True)
class Rung:
    name: str
    parent: str | None  # the rung it builds on; None for the ladder's first rung
    description: str
    reference: dict[str, float]  # test_acc, layer1_distance_px, epochs...; {}: none


def parent_in(defaults: Any, path: Path) -> str | None:
    """The rung `defaults` names: `- epochs200` or `- /step/epochs200`, either with an `@<package>`; other groups'
    configs (`/data/...`, `override ...`, a dict entry) are not rungs."""
    if defaults is not None and not isinstance(defaults, (list, ListConfig)):
        raise UserError(f"{path}: defaults must be a list, e.g. defaults: [epochs200, _self_]")
    names = [name.partition("@")[0].strip().removeprefix("/step/") for name in defaults or () if isinstance(name, str)]
    parents = [name for name in names if name != "_self_" and not name.startswith("/")]
    if len(parents) > 1:
        raise UserError(f"{path}: defaults name {len(parents)} rungs ({', '.join(parents)}); a rung builds on one")
    return parents[0] if parents else None


def read_rung(path: Path) -> Rung:
    """One conf/step/<rung>.yaml: its parent and its rung_info.<rung> block, checked against the schema."""
    name = path.stem
    try:
        node = OmegaConf.load(path)
        info = node.get("rung_info", {}).get(name) if isinstance(node, DictConfig) else None
        if info is None:
            raise UserError(
                f"{path}: no rung_info.{name} block: give it a one-line description, "
                f"e.g. rung_info: {{{name}: {{description: what this rung adds}}}}"
            )
        info = OmegaConf.merge(OmegaConf.structured(RungInfo), info)
        figures = OmegaConf.to_container(info.reference) if info.reference is not None else {}
    except OmegaConfBaseException as error:  # the schema's word on it, and which key
        key = f"rung_info.{name}.{error.full_key}" if getattr(error, "full_key", None) else "rung_info"
        raise UserError(f"{path}: {key}: {str(error).splitlines()[0]}") from None
    if node.get("rung") != name:
        raise UserError(f"{path}: rung: {node.get('rung')} must be the file's name, rung: {name}")
    reference = {key: value for key, value in figures.items() if value is not None}  # those the article gives
    return Rung(name, parent_in(node.get("defaults"), path), str(info.description), reference)


def read_ladder(step_dir: Path) -> tuple[Rung, ...]:
    """Every rung under ``step_dir``, bottom to top: the chain from the one rung without a parent."""
    rungs = {rung.name: rung for rung in map(read_rung, sorted(step_dir.glob("*.yaml")))}
    roots = [rung.name for rung in rungs.values() if rung.parent is None]
    if len(roots) != 1:
        raise UserError(
            f"{step_dir}: {len(roots)} rungs build on no other ({', '.join(roots) or 'none'}); "
            "exactly one starts the ladder, every other names its parent rung in its defaults"
        )
    if orphan := next((rung for rung in rungs.values() if rung.parent not in (None, *rungs)), None):
        raise UserError(
            f"{step_dir / orphan.name}.yaml: builds on '{orphan.parent}', which has no "
            f"{step_dir / orphan.parent}.yaml; choose one of {', '.join(sorted(rungs))}"
        )
    chain = [rungs[roots[0]]]
    while following := [rung.name for rung in rungs.values() if rung.parent == chain[-1].name]:
        if len(following) > 1:
            raise UserError(
                f"{step_dir}: rungs {' and '.join(following)} both build on {chain[-1].name}; the "
                "ladder is one chain, so let one of them build on the other"
            )
        chain.append(rungs[following[0]])
    if left := sorted(rungs.keys() - {rung.name for rung in chain}):
        raise UserError(
            f"{step_dir}: rungs {', '.join(left)} build on each other in a loop; let one of them "
            f"build on {chain[-1].name}"
        )
    return tuple(chain)


@functools.cache
def ladder() -> tuple[Rung, ...]:
    """The ladder's rungs, bottom to top, as conf/step/ declares them; read once."""
    return read_ladder(CONF_DIR / "step")


def rung_names() -> tuple[str, ...]:
    return tuple(rung.name for rung in ladder())


def check_rung(rung: str) -> str:
    if rung not in rung_names():
        raise UserError(f"unknown rung '{rung}': choose one of {', '.join(rung_names())}")
    return rung


def get_rung(rung: str) -> Rung:
    return ladder()[rung_names().index(check_rung(rung))]


def rung_index(rung: str) -> int | None:
    """The rung's position in the ladder (0: the first), the order of tables and charts; None if not a rung."""
    return rung_names().index(rung) if rung in rung_names() else None


def override_key(override: str) -> str:
    """The key a command-line override sets, adds or deletes: `optim.lr` of `+optim.lr=3`, `step` of `~step`."""
    return override.partition("=")[0].lstrip("+~")


def is_step_override(override: str) -> bool:
    return override_key(override) == "step"


def accept_plus_step(overrides: Sequence[str]) -> list[str]:
    """`+step=<rung>` as `step=<rung>`: Hydra refuses `+` on a group of the defaults list (conf/config.yaml has
    `step: null`), and `+step=` is what earlier versions of this project (and many Hydra projects) document."""
    return [o.lstrip("+") if is_step_override(o) else o for o in overrides]


def compose_unchecked(overrides: Sequence[str]) -> DictConfig:
    """conf/config.yaml with `overrides`, as Hydra composes it for train.py (inside train.py, by its Hydra)."""
    running = GlobalHydra.instance().is_initialized()
    with contextlib.nullcontext() if running else initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The config `python train.py <overrides>` runs, validated: a mistake is one UserError line."""
    register_schema(CONF_DIR)  # again: a source module added since this process started is a data= option too
    overrides = accept_plus_step(overrides)
    try:
        cfg = compose_unchecked(overrides)
    except Exception as error:
        raise explain(error, overrides) from None
    validate(cfg, overrides)
    return cfg


def compose_rung(rung: str, overrides: Sequence[str] = ()) -> DictConfig:
    return compose_config([f"step={check_rung(rung)}", *overrides])


@functools.cache
def base_values(source: str) -> dict[str, Any]:
    """conf/config.yaml with data=<source> alone (no rung, no command line), resolved: each key's default."""
    return OmegaConf.to_container(compose_unchecked([f"data={source}"]), resolve=True)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: {"optim.lr": 0.001, ...}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {f"{prefix}{key}": value})
    return flat


def validate(cfg: DictConfig, overrides: Sequence[str] = ()) -> None:
    """What composing does not check, before anything is written: a rung chosen, no key Hydra force-added with `+`,
    values in range and set, interpolations that resolve. Raises a one-line UserError."""
    if cfg.rung not in rung_names():
        raise UserError(f"choose a rung with step=<rung>, one of {', '.join(rung_names())}")
    try:
        # Hydra adds `+key=value` past the schema (OmegaConf's force_add): the plain values merged into the
        # schema again refuse a key it does not declare.
        schema = OmegaConf.structured(Config)
        schema.data = OmegaConf.structured(OmegaConf.get_type(cfg, "data"))
        OmegaConf.merge(schema, OmegaConf.to_container(cfg))
        check_values(cfg)  # before resolving: trainer.precision's resolver imports torch
        if missing := sorted(OmegaConf.missing_keys(cfg)):
            raise UserError(f"{missing[0]} has no value: give one on the command line, {missing[0]}=...")
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as error:
        raise explain(error, overrides) from None


def check_values(cfg: DictConfig) -> None:
    """A UserError for the first value outside the range its schema field declares, then for a rule across keys."""
    for key, in_range, words, example in valid_values(OmegaConf.get_type(cfg, "data")):
        with contextlib.suppress(MissingMandatoryValue):  # validate says it has no value
            if not in_range(value := OmegaConf.select(cfg, key, throw_on_missing=True)):
                shown = repr(value) if isinstance(value, str) else "null" if value is None else value
                raise UserError(f"{key}={shown} is not valid: {key} must be {words}, e.g. {key}={example}")
    probes = sorted(info.name for info in pkgutil.iter_modules([str(PROBES_DIR)]) if not info.name.startswith("_"))
    if unknown := [name for name in cfg.analysis.probes or () if name not in probes]:
        raise UserError(f"analysis.probes: no probe '{unknown[0]}': choose from {', '.join(probes)}")
    heads, width = cfg.model.num_heads, cfg.model.embed_dim
    if heads >= 1 and width % heads:
        raise UserError(
            f"model.embed_dim={width} is not valid: it must be a multiple of model.num_heads={heads}, "
            f"e.g. model.embed_dim={64 * heads}"
        )


def explain(error: BaseException, overrides: Sequence[str]) -> UserError:
    """The UserError for a failed composition or check of the config with `overrides`."""
    cause, message = error.__cause__ or error, str(error)
    first = next((line.strip() for line in message.splitlines() if line.strip()), type(error).__name__)
    full_key = re.sub(r"\[\d+\]$", "", getattr(cause, "full_key", None) or "")  # optim.betas[0]: the list
    if isinstance(error, OverrideParseException):
        return UserError(
            f"malformed override {error.override!r} ({error.message.strip().splitlines()[0]}): write key=value, "
            "quoting a value with spaces or brackets, e.g. 'data.root=\"/data/my cifar\"'"
        )
    if isinstance(error, MissingConfigException):  # `data=imagenet`: Hydra's several lines as one
        group, _, option = (error.missing_cfg_file or "").partition("/")  # the groups are top-level: data=../etc
        if not (option and error.options):
            return UserError(first)
        if group == "step":  # the rungs in ladder order
            return UserError(f"unknown rung '{option}': choose one of {', '.join(rung_names())}")
        return UserError(
            f"{group}={option}: no such choice (conf/{group}/{option}.yaml); choose one of {', '.join(error.options)}"
        )
    if already := re.search(r"An item is already at '([^']+)'", message):
        key = already.group(1)
        given = next((o for o in overrides if override_key(o) == key), f"+{key}=...")
        return UserError(f"{given}: {key} is already a key; set it without the +: {given.lstrip('+')}")
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and full_key:
        return UserError(unknown_key(full_key, getattr(cause, "object_type", None)))
    if isinstance(cause, ValidationError) and full_key:
        return UserError(wrong_type(full_key, overrides))
    return UserError(f"{first.rstrip('.')} (overrides: {' '.join(overrides)})")


def unknown_key(key: str, node_type: type | None = None) -> str:
    """`optim.lrr: no such key; did you mean optim.lr?`, from the schema's keys."""
    known, schemas = schema_keys(), data_schemas()
    parent, _, name = key.rpartition(".")
    if parent == "data" and (owners := [f"data={n}" for n, schema in schemas.items() if key in schema_keys(schema)]):
        chosen = next((f" with data={n}" for n, schema in schemas.items() if schema is node_type), "")
        return f"{key}: no such key{chosen}; it belongs to {' or '.join(owners)}"
    if close := difflib.get_close_matches(key, known, n=1, cutoff=0.6):
        return f"{key}: no such key; did you mean {close[0]}?"
    prefix = f"{parent}." if parent else ""
    siblings = sorted({k[len(prefix) :].split(".")[0] for k in known if k.startswith(prefix)})
    return f"{key}: no such key; {parent or 'the top level'} has {', '.join(siblings)} (see python train.py --help)"


# A schema type, in words (another list: "a list").
KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
KINDS |= {list[int]: "a list of integers", list[float]: "a list of numbers"}


def wrong_type(key: str, overrides: Sequence[str]) -> str:
    """`trainer.max_epochs='abc' is not valid: trainer.max_epochs takes an integer, e.g. trainer.max_epochs=100`:
    what the schema's type takes, in words, and the key's value without the faulty override."""
    keys = schema_keys()
    given = next((o for o in overrides if override_key(o) == key), None)
    if key in keys:
        optional = type(None) in typing.get_args(keys[key])  # `int | None`: int, or null
        hint = next(arg for arg in typing.get_args(keys[key]) if arg is not type(None)) if optional else keys[key]
        kind = KINDS.get(hint, "a list" if typing.get_origin(hint) is list else "another kind of value")
        kind += " or null" if optional else ""
    else:
        kind = "a block of keys, e.g. " + next(k for k in keys if k.startswith(f"{key}.")) + "=..."
    try:  # an example: the value without the faulty override, if the rest composes
        value = OmegaConf.select(compose_unchecked([o for o in overrides if o is not given]), key)
    except Exception:
        value = None
    if OmegaConf.is_list(value):
        value = f"[{','.join(str(v) for v in value)}]"
    elif isinstance(value, bool):
        value = str(value).lower()
    example = "" if value is None or OmegaConf.is_config(value) else f", e.g. {key}={value}"
    shown = given.partition("=")[2] if given else "?"
    return f"{key}={shown!r} is not valid: {key} takes {kind}{example}"
