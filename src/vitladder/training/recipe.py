"""A run folder belongs to one recipe: its resolved config.yaml. A finished rung is skipped, and an
interrupted one resumed, only when the config that would run now is the same outside the keys below."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Keys (and blocks) that cannot change a run's results: where it is written and shown, how it is logged.
# speed.compile changes kernels, not the recipe; inference_mode and the checkpoint interval, nothing learned;
# rung_info describes the rungs (a reworded description or a new reference figure trains nothing anew).
OUTSIDE_THE_RECIPE: tuple[str, ...] = (
    "output_root",
    "run_dir",
    "ladder",
    "overwrite",
    "wandb",
    "speed.compile",
    "checkpoint",
    "trainer.inference_mode",
    "rung_info",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "trainer.default_root_dir",
    "analysis.batch_size",
)  # and a data source's keys that its Config marks so (config_schema.source_key(in_recipe=False))
ABSENT = "(absent)"
SHOWN_CHANGES = 6  # a longer list ends with "and N more"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def outside_the_recipe() -> tuple[str, ...]:
    """OUTSIDE_THE_RECIPE and the data sources' keys marked outside it (data.cache_dir, data.max_file_mib)."""
    from vitladder.config_schema import keys_outside_the_recipe

    return (*OUTSIDE_THE_RECIPE, *keys_outside_the_recipe())


def in_recipe(key: str, outside: tuple[str, ...] | None = None) -> bool:
    outside = outside_the_recipe() if outside is None else outside
    return not any(key == name or key.startswith(f"{name}.") for name in outside)


def recipe_changes(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, stored value, current value) for every recipe key that differs; both configs resolved."""
    old, new, outside = flatten(stored), flatten(current), outside_the_recipe()
    return [
        (key, old.get(key, ABSENT), new.get(key, ABSENT))
        for key in sorted(old.keys() | new.keys())
        if in_recipe(key, outside) and old.get(key, ABSENT) != new.get(key, ABSENT)
    ]


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).replace(" ", "")


def changed_recipe_message(run_dir: Path, changes: list[tuple[str, Any, Any]], finished: bool) -> str:
    """One line: what changed, and the two ways on."""
    state = "a finished run" if finished else "an interrupted run"
    if changes:
        listed = ", ".join(f"{key} {_show(old)} → {_show(new)}" for key, old, new in changes[:SHOWN_CHANGES])
        more = f" and {len(changes) - SHOWN_CHANGES} more" if len(changes) > SHOWN_CHANGES else ""
        what = f"{state} of another recipe ({listed}{more})"
    else:
        what = f"{state} whose config.yaml is missing or unreadable, so its recipe is unknown"
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
