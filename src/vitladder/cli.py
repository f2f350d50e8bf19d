"""What the entry points share: a user's mistake is one line and a non-zero exit, never a traceback; and
train.py's Hydra app, each job of which is composed once and validated once, a sweep's before its first job."""

from __future__ import annotations

import functools
import itertools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from vitladder.config import accept_plus_step, compose_config, explain, validate
from vitladder.errors import UserError, describe_os_error
from vitladder.quiet import quiet_libraries

F = TypeVar("F", bound=Callable)
LADDER_DIR_HELP = "e.g. outputs/full: holds one folder per rung"


def reports_user_errors(func: F) -> F:
    """Turns a UserError into `error: <message>` on stderr and its exit code, and so does a read or write the
    system refused (an OSError: full disk, no permission), naming the path. Every entry point runs through it,
    so it also keeps the libraries' tips and notes out of the output (vitladder.quiet)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        quiet_libraries()
        try:
            return func(*args, **kwargs)
        except (UserError, OSError) as error:
            print(f"error: {error if isinstance(error, UserError) else describe_os_error(error)}", file=sys.stderr)
            raise SystemExit(getattr(error, "exit_code", 2)) from None

    return wrapper  # type: ignore[return-value]


def ladder_folder(path: Path) -> Path:
    """The ladder folder a script was given (``ladder_dir``, help ``LADDER_DIR_HELP``), or a one-line error."""
    if not path.is_dir():
        raise UserError(f"{path}: no such ladder folder (train one with `make ladder`)")
    return path


@reports_user_errors
def run_app(app: Callable[[], Any]) -> None:
    """Runs train.py's ``@hydra.main`` app. Hydra reports a mistake on the command line on several lines and exits
    1: with HYDRA_FULL_ERROR (its documented switch) it raises it instead, and it is worded here as one line."""
    from hydra.errors import HydraException

    os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv[1:] = accept_plus_step(sys.argv[1:])
    try:
        app()
    except HydraException as error:  # composing: a job's own errors are UserErrors, or bugs with their traceback
        raise explain(error, [arg for arg in sys.argv[1:] if "=" in arg and not arg.startswith("-")]) from None


CHECKED: set[tuple[str, ...]] = set()  # the overrides of each job this process validated before its sweep began


class CheckSweep(Callback):
    """Hydra calls it before a sweep (`-m`, conf/config.yaml's hydra.callbacks): it composes and validates every
    job, so that a mistake in any of them is one line and nothing is written (Hydra's sweeper would write
    multirun.yaml, then run job after job). A job this check did not see validates itself (check_job): a sweep
    only a sweeper plugin expands, or a job started in another process (SLURM)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        jobs = sweep_jobs(list(config.hydra.overrides.task))
        reports_user_errors(lambda: [compose_config(job) for job in jobs])()  # a Callback's exception is a warning
        CHECKED.update(tuple(job) for job in jobs)


def sweep_jobs(overrides: Sequence[str]) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper expands a sweep (a key's last override wins, in its first
    place); none for a sweep only a sweeper plugin expands (intervals)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    choices = {}
    try:
        for override in OverridesParser.create().parse_overrides(list(overrides)):
            key, sweep = override.get_key_element(), override.is_sweep_override()
            values = override.sweep_string_iterator() if sweep else [override.get_value_element_as_str()]
            choices[key] = [f"{key}={value}" for value in values]
    except HydraException:
        return []
    return [list(job) for job in itertools.product(*choices.values())]


def check_job(cfg: DictConfig) -> None:
    """Validates the config of the job Hydra runs, unless this process checked it before its sweep began."""
    from hydra.core.hydra_config import HydraConfig

    overrides = list(HydraConfig.get().overrides.task)
    if tuple(overrides) not in CHECKED:
        validate(cfg, overrides)
