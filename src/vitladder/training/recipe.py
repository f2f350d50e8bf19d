"""A run folder belongs to one recipe: its resolved config.yaml. A finished rung is skipped, and an
interrupted one resumed, only when the config that would run now is the same outside the keys its schema
marks ``setting(in_recipe=False)`` (config_schema.py): where a run is written and shown, how it is logged,
its kernels, its checkpoint interval, the rungs' descriptions, the evaluation batch and the probes.

An upgrade keeps a run's identity: a setting added since (absent from config.yaml) is no change while it
stands at its default, and a setting removed since is none if it stood at the default it had then, as the
folder's provenance.json records it (training/provenance.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vitladder.config import flatten
from vitladder.config_schema import outside_the_recipe
from vitladder.run_folder import RunPaths
from vitladder.training.provenance import key_defaults, read_provenance, versions

ABSENT = "(absent)"
SHOWN_CHANGES = 6  # a longer list ends with "and N more"


def in_recipe(key: str, outside: tuple[str, ...] | None = None) -> bool:
    outside = outside_the_recipe() if outside is None else outside
    return not any(key == name or key.startswith(f"{name}.") for name in outside)


def recipe_changes(
    stored: Mapping[str, Any],
    current: Mapping[str, Any],
    defaults_then: Mapping[str, Any] | None = None,
    defaults_now: Mapping[str, Any] | None = None,
) -> list[tuple[str, Any, Any]]:
    """(key, stored value, current value) for every recipe key that differs; both configs resolved. A key only
    the current config has is no change at its default now, one only the stored config has none at its default
    then (defaults: dotted keys, provenance.key_defaults)."""
    old, new, outside = flatten(stored), flatten(current), outside_the_recipe()
    then, now = defaults_then or {}, defaults_now or {}

    def at_default(key: str) -> bool:
        if key not in old:
            return key in now and new[key] == now[key]
        return key not in new and key in then and old[key] == then[key]

    return [
        (key, old.get(key, ABSENT), new.get(key, ABSENT))
        for key in sorted(old.keys() | new.keys())
        if in_recipe(key, outside) and old.get(key, ABSENT) != new.get(key, ABSENT) and not at_default(key)
    ]


@dataclass(frozen=True)
class Comparison:
    """A run folder's recipe against the config that would run now."""

    changes: list[tuple[str, Any, Any]] | None  # None: config.yaml missing or unreadable
    dropped: list[str]  # settings the current version no longer has, that stood at the default they had
    made_by: list[str]  # what made the folder, where it differs from now: "lightning 2.5.2 → 2.6.6"

    @property
    def same(self) -> bool:
        return self.changes == []


def compare_folder(paths: RunPaths, cfg: DictConfig) -> Comparison:
    """The folder's config.yaml (and provenance.json) against ``cfg``."""
    made = read_provenance(paths)
    made_by = [
        f"{name} {_show(before)} → {_show(versions().get(name))}"
        for name, before in made.get("versions", {}).items()
        if before != versions().get(name)
    ]
    try:
        stored = OmegaConf.to_container(OmegaConf.load(paths.config), resolve=False)
    except Exception:  # missing or unreadable: its recipe is unknown
        stored = None
    if not isinstance(stored, dict):
        return Comparison(None, [], made_by)
    current = OmegaConf.to_container(cfg, resolve=True)
    then = made.get("defaults", {})
    old, new, outside = flatten(stored), flatten(current), outside_the_recipe()
    dropped = [k for k, v in old.items() if k not in new and then.get(k, ABSENT) == v and in_recipe(k, outside)]
    return Comparison(recipe_changes(stored, current, then, key_defaults(cfg)), sorted(dropped), made_by)


def dropped_message(run_dir: Path, dropped: list[str]) -> str:
    return (
        f"{run_dir}: {', '.join(dropped)} no longer {'is a setting' if len(dropped) == 1 else 'are settings'}; "
        "the run stood at the default, so it is kept as the same recipe"
    )


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).replace(" ", "")


def changed_recipe_message(
    run_dir: Path, changes: list[tuple[str, Any, Any]], finished: bool, made_by: Sequence[str] = ()
) -> str:
    """One line: what changed (and what made the folder, where that differs from now), and the two ways on."""
    state = "a finished run" if finished else "an interrupted run"
    made = [f"made with {', '.join(made_by)}"] if made_by else []
    if changes:
        listed = ", ".join(f"{key} {_show(old)} → {_show(new)}" for key, old, new in changes[:SHOWN_CHANGES])
        more = f" and {len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else ""
        what = f"{state} of another recipe ({'; '.join([listed + more, *made])})"
    else:
        unknown = f"{state} whose config.yaml is missing or unreadable, so its recipe is unknown"
        what = f"{unknown} ({made[0]})" if made else unknown
    return (
        f"{run_dir} holds {what}: to keep it, train under another ladder name (ladder=NAME, or "
        f"make ladder LADDER=NAME); to replace it, add overwrite=true (make ladder ARGS=overwrite=true; "
        f"the old folder is moved to {run_dir.name}.replaced-<time>/)"
    )


def move_aside(run_dir: Path) -> Path:
    """Renames a run folder to `<rung>.replaced-<time>/` beside it (never deletes); returns the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}")
    counter = 2
    while target.exists():
        target = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}-{counter}")
        counter += 1
    run_dir.rename(target)
    return target
