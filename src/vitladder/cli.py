"""What every entry point shares: user errors as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from vitladder.config import check_rung, compose_config, is_step_override, rung_names
from vitladder.errors import UserError, describe_os_error
from vitladder.quiet import quiet_libraries

F = TypeVar("F", bound=Callable)


def fail(message: str, exit_code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(exit_code)


def reports_user_errors(func: F) -> F:
    """Turns a UserError into `error: <message>` on stderr and its exit code, and so does a read or
    write the system refused (an OSError: full disk, no permission), naming the path. Every entry point
    runs through it, so it also keeps the libraries' tips and notes out of the output (vitladder.quiet)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        quiet_libraries()
        try:
            return func(*args, **kwargs)
        except UserError as error:
            fail(str(error), error.exit_code)
        except OSError as error:
            fail(describe_os_error(error))

    return wrapper  # type: ignore[return-value]


def check_command_line(argv: Sequence[str]) -> None:
    """Composes and validates every job of train.py's command line before Hydra runs it, so that a mistake
    is one line and exit 2 (Hydra would print several lines and exit 1) and nothing is written.

    Hydra's own argument parser and sweep expansion read the command line; a sweep (`-m step=a,b`) is
    checked job by job. Help, completion and other config files are left to Hydra."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args, _ = get_args_parser().parse_known_args(argv)
    left_to_hydra = ("help", "hydra_help", "shell_completion", "info", "config_path", "config_name", "config_dir")
    if any(getattr(args, name, None) for name in left_to_hydra):
        return
    overrides = [o for o in args.overrides if not o.lstrip("+~").startswith("hydra")]  # Hydra's own settings
    for override in overrides:  # an unknown rung names the ladder's rungs, in order
        if is_step_override(override) and not override.startswith("~"):
            for rung in override.partition("=")[2].split(","):
                check_rung(rung.strip())
    jobs = [overrides]
    if args.multirun:
        try:
            parsed = OverridesParser.create().parse_overrides(overrides)
            jobs = BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]
        except HydraException:
            jobs = []  # a sweep this expansion does not know (ranges, another sweeper): each job validates itself
    for job in jobs:
        compose_config(job)  # no rung: require_rung says so once Hydra has composed the config


LADDER_DIR_HELP = "e.g. outputs/full: holds one folder per rung"


def ladder_folder(path: Path) -> Path:
    """The ladder folder a script was given (``ladder_dir``, help ``LADDER_DIR_HELP``), or a one-line error."""
    if not path.is_dir():
        raise UserError(f"{path}: no such ladder folder (train one with `make ladder`)")
    return path


def require_rung(rung: str) -> None:
    if rung not in rung_names():
        raise UserError(f"choose a rung with step=<rung>, one of {', '.join(rung_names())}")
