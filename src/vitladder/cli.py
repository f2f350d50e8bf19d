"""What the entry points share: a user's mistake is one line and a non-zero exit, never a traceback, and the
libraries' tips and notes are kept out of the output; and train.py's Hydra app, each job of which is composed and
validated once, a sweep's before its first job."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vitladder.config import accept_plus_step, compose_config, explain, validate
from vitladder.errors import UserError, describe_os_error
from vitladder.run_folder import EPOCH, TRACK

LADDER_DIR_HELP = "e.g. outputs/full: holds one folder per rung"
LIGHTNING_INFO = "lightning.pytorch.utilities.rank_zero"  # the logger of Lightning's rank_zero_info
PACKAGE = Path(__file__).resolve().parent
LIBRARY_NOTES = (  # (message, category, module) of each library's note about its own code
    # Lightning 2.6's utilities/_pytree.py still builds a LeafSpec at every fit and test (torch 2.10 and later)
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, r"lightning\.pytorch\.utilities\._pytree"),
    # every resume finds its last.ckpt there, by design
    (r"Checkpoint directory .* exists and is not empty", Warning, r"lightning\.pytorch\.callbacks\.model_checkpoint"),
    # on several processes, its advice to sync each epoch-level value, given also for the values only rank 0 logs
    # (rank_zero_only=True: the epoch axis and the attention tracking), which no other rank could join in a sync
    (
        rf"It is recommended to use `self\.log\('({EPOCH}|{TRACK}[^']*)', \.\.\., sync_dist=True\)`",
        Warning,
        r"lightning\.pytorch\.trainer\.connectors\.logger_connector\.result",
    ),
)


def drop_tips(record: logging.LogRecord) -> bool:
    """Lightning's tips to install its cloud products (every Trainer prints them), and nothing else it logs."""
    return not str(record.msg).startswith("💡 Tip: ")


def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, line=None) -> str:
    """A warning as one line: ``warning: <message>`` for this project's, with the place and category for others'."""
    text = " ".join(str(message).split())
    if Path(filename).resolve().is_relative_to(PACKAGE):
        return f"warning: {text}\n"
    return f"{filename}:{lineno}: {category.__name__}: {text}\n"


def quiet_libraries() -> None:
    """Drops the libraries' notes about their own code, each filter one message of one module, and makes every
    warning one line (idempotent: Python replaces an equal filter, a logger keeps one of each filter)."""
    for message, category, module in LIBRARY_NOTES:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    logging.getLogger(LIGHTNING_INFO).addFilter(drop_tips)
    warnings.formatwarning = one_line


def reports_user_errors(func: Callable) -> Callable:
    """Every entry point runs through it: quiet libraries, and a UserError, or a read or write the system refused
    (an OSError: full disk, no permission, naming the path), as `error: <message>` on stderr and its exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        quiet_libraries()
        try:
            return func(*args, **kwargs)
        except (UserError, OSError) as error:
            print(f"error: {error if isinstance(error, UserError) else describe_os_error(error)}", file=sys.stderr)
            raise SystemExit(getattr(error, "exit_code", 2)) from None

    return wrapper


def ladder_folder(path: Path) -> Path:
    """The ladder folder a script was given (``ladder_dir``, help ``LADDER_DIR_HELP``), or a one-line error."""
    if not path.is_dir():
        raise UserError(f"{path}: no such ladder folder (train one with `make ladder`)")
    return path


@reports_user_errors
def run_app(app: Callable[[], Any]) -> None:
    """Runs train.py's ``@hydra.main`` app. Hydra reports a mistake on the command line on several lines and exits
    1: with HYDRA_FULL_ERROR (its documented switch) it raises it instead, and it is worded here as one line."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv[1:] = accept_plus_step(sys.argv[1:])
    try:
        app()
    except HydraException as error:  # composing: a job's own errors are UserErrors, or bugs with their traceback
        raise explain(error, [arg for arg in sys.argv[1:] if "=" in arg and not arg.startswith("-")]) from None


CHECKED: set[tuple[str, ...]] = set()  # the overrides of each job this process validated before its sweep began


class CheckSweep(Callback):
    """Hydra calls it before a sweep (`-m`, conf/config.yaml's hydra.callbacks): it validates every job, so that a
    mistake in any is one line and nothing is written (Hydra's sweeper would write multirun.yaml, then run job after
    job). A job it did not see validates itself (check_job): a sweeper plugin's, or one run elsewhere (SLURM)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        jobs = sweep_jobs(OmegaConf.to_container(config.hydra.overrides.task))  # as typed: ${...} unresolved
        reports_user_errors(lambda: check_sweep(jobs))()  # a Callback's exception is only a warning
        CHECKED.update(tuple(job) for job in jobs)


def check_sweep(jobs: Sequence[Sequence[str]]) -> None:
    """Composes and validates every job, and refuses two that would train different recipes into one run folder:
    the second would stop there, after the first had trained (a run folder holds one recipe)."""
    from vitladder.training.recipe import listed_changes, recipe_changes  # Lightning's import: for a sweep only

    first_into: dict[str, tuple[int, dict]] = {}  # run folder -> the first job training into it, and its config
    for number, job in enumerate(jobs):
        cfg = compose_config(job)
        resolved = OmegaConf.to_container(cfg, resolve=True)
        first, recipe = first_into.setdefault(str(cfg.run_dir), (number, resolved))
        if changes := recipe_changes(recipe, resolved):
            key = changes[0][0]
            raise UserError(
                f"jobs #{first} and #{number} of this sweep would both train into {cfg.run_dir}, with different "
                f"recipes ({listed_changes(changes)}): give each its own ladder, e.g. "
                f"'ladder={cfg.ladder}-{key.rpartition('.')[2]}${{{key}}}'"
            )


def sweep_jobs(overrides: Sequence[str]) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper expands a sweep (a key's last override wins, in its first
    place); none for a sweep only a sweeper plugin expands (intervals)."""
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
    overrides = OmegaConf.to_container(HydraConfig.get().overrides.task)  # as the sweep check saw them
    if tuple(overrides) not in CHECKED:
        validate(cfg, overrides)
