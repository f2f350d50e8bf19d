"""The ladder runner: every rung (and seed) in order, finished ones skipped, with a time estimate."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from vitladder.config import compose_rung, is_step_override, rung_names
from vitladder.errors import UserError
from vitladder.run_folder import is_finished, read_summary
from vitladder.training.recipe import replaces_old_run
from vitladder.training.run import check_placement

LONG_LADDER_S = 24 * 3600  # beyond this the ladder starts only when confirmed (the full recipe on a CPU: ~1,000 h)


@dataclass(frozen=True)
class PlannedRun:
    rung: str
    seed: int
    cfg: DictConfig
    overrides: list[str]  # what train.py would be given: kept in the run folder

    @property
    def run_dir(self) -> Path:
        return Path(self.cfg.run_dir)


def plan_ladder(seeds: Sequence[int], overrides: Sequence[str]) -> list[PlannedRun]:
    if any(is_step_override(override) for override in overrides):
        raise UserError(
            "the ladder trains every rung: drop step=..., or train one rung with python train.py step=<rung>"
        )
    return [
        PlannedRun(
            rung, seed, compose_rung(rung, [*overrides, f"seed={seed}"]), [f"step={rung}", *overrides, f"seed={seed}"]
        )
        for seed in seeds
        for rung in rung_names()
    ]


def format_seconds(seconds: float) -> str:
    hours, rest = divmod(int(round(seconds)), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def runs_to_train(runs: Sequence[PlannedRun]) -> list[PlannedRun]:
    """The unfinished runs, in order, and with overwrite=true those of another recipe (replaces_old_run)."""
    replaced = {run.run_dir for run in runs if replaces_old_run(run.cfg)}
    return [run for run in runs if run.run_dir in replaced or not is_finished(run.run_dir)]


def run_ladder(
    runs: Sequence[PlannedRun],
    train: Callable[..., dict],
    estimate: Callable[[Sequence[DictConfig]], list[float]],
    log: Callable[[str], None] = print,
    max_seconds: float | None = LONG_LADDER_S,
) -> list[dict]:
    """Trains the unfinished runs in order, with an estimate first and an ETA after each. Before anything trains it
    stops, saying how to go on, at another recipe's run folder, a run its devices cannot train, and an estimate
    over ``max_seconds`` (None: no limit)."""
    todo = runs_to_train(runs)
    for run in todo:  # all of them first, not a rung after those below it have trained
        try:
            check_placement(run.cfg)
        except UserError as error:
            raise UserError(f"{run.rung} (seed {run.seed}): {error}") from None
    if len(todo) < len(runs):
        log(f"{len(runs) - len(todo)} of {len(runs)} runs already finished: skipping them")
    expected = estimate([run.cfg for run in todo]) if todo else []
    total = f"estimated time for {len(todo)} runs on this machine: {format_seconds(sum(expected))}"
    if todo and max_seconds is not None and sum(expected) > max_seconds:
        raise UserError(
            f"{total}, far beyond a working day: the full recipe is meant for a GPU. Run PROFILE=smoke for a few "
            "minutes, or run on a GPU machine (choose its accelerator with ARGS=trainer.accelerator=gpu), or add "
            "CONFIRM_LONG=1 (scripts/ladder.py --yes) to run it here anyway"
        )
    if todo:
        log(total)
    started = time.time()
    for position, run in enumerate(todo):
        log(f"[{position + 1}/{len(todo)}] {run.rung} (seed {run.seed}) -> {run.run_dir}")
        summary = train(run.cfg, overrides=run.overrides)
        # What is left, rescaled by how far off the estimate has been so far.
        left = sum(expected[position + 1 :]) * (time.time() - started) / max(sum(expected[: position + 1]), 1e-9)
        log(
            f"[{position + 1}/{len(todo)}] {run.rung}: test acc {summary['test_acc']:.2%} "
            f"in {format_seconds(summary['seconds'])}; ladder ETA {format_seconds(left)}"
        )
    return [read_summary(run.run_dir) for run in runs]
