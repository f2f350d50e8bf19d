"""The ladder's rungs, read from conf/step/ alone: one YAML per rung holds its delta, its `rung_info` (a one-line
description, the article's reference figures where there are any) and, in its Hydra `defaults`, the rung it
builds on. The ladder is the chain from the one rung without a parent, so adding a rung is adding a file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vitladder.config_schema import RungInfo
from vitladder.errors import UserError


@dataclass(frozen=True)
class Rung:
    name: str
    parent: str | None  # the rung it builds on; None for the ladder's first rung
    description: str
    reference: dict[str, float] = field(default_factory=dict)  # test_acc, layer1_distance_px, epochs...; {}: none


def parent_in(defaults: Any, path: Path) -> str | None:
    """The rung a rung's `defaults` names: `- epochs200` (the same group) or `- /step/epochs200`, either with an
    `@<package>`; other groups' configs (`/data/...`, `override ...`, a dict entry) are not rungs."""
    if defaults is not None and not isinstance(defaults, (list, ListConfig)):
        raise UserError(f"{path}: defaults must be a list, e.g. defaults: [epochs200, _self_]")
    names = [entry.partition("@")[0].strip() for entry in defaults or () if isinstance(entry, str)]
    parents = [name for name in (n.removeprefix("/step/") for n in names if n != "_self_") if not name.startswith("/")]
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
    for rung in rungs.values():
        if rung.parent is not None and rung.parent not in rungs:
            raise UserError(
                f"{step_dir / rung.name}.yaml: builds on '{rung.parent}', which has no "
                f"{step_dir / rung.parent}.yaml; choose one of {', '.join(sorted(rungs))}"
            )
    chain = [rungs[roots[0]]]
    while following := [rung.name for rung in rungs.values() if rung.parent == chain[-1].name]:
        if len(following) > 1:
            raise UserError(
                f"{step_dir}: rungs {' and '.join(following)} both build on {chain[-1].name}; the "
                "ladder is one chain, so let one of them build on the other"
            )
        chain.append(rungs[following[0]])
    left = sorted(rungs.keys() - {rung.name for rung in chain})
    if left:
        raise UserError(
            f"{step_dir}: rungs {', '.join(left)} build on each other in a loop; let one of them "
            f"build on {chain[-1].name}"
        )
    return tuple(chain)
