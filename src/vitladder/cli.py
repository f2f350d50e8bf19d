"""What every entry point shares: user errors as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import functools
import itertools
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

    A sweep (`-m step=a,b`) is checked job by job, expanded as Hydra's basic sweeper does. Help, completion,
    other config files and sweeps only a sweeper plugin expands (intervals, globs) are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = argparse.ArgumentParser(add_help=False)  # Hydra's flags that matter here (tests/test_cli.py pins them)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--cfg", "-c", "--package", "-p", "--experimental-rerun")  # a value, not an override
    left = ["--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc", "--info", "-i", "--config-path"]
    parser.add_argument(*left, "-cp", "--config-name", "-cn", "--config-dir", "-cd", dest="left", nargs="?", const=1)
    args, _ = parser.parse_known_args(argv)
    if args.left:
        return
    overrides = [o for o in args.overrides if not o.lstrip("+~").startswith("hydra")]  # Hydra's own settings
    for override in overrides:  # an unknown rung names the ladder's rungs, in order
        if is_step_override(override) and not override.startswith("~"):
            for rung in override.partition("=")[2].split(","):
                check_rung(rung.strip())
    jobs = [overrides]
    if args.multirun:
        try:
            choices = {}  # key: its values in the sweep, the last override of a key winning
            for override in OverridesParser.create().parse_overrides(overrides):
                key, sweep = override.get_key_element(), override.is_sweep_override()
                values = override.sweep_string_iterator() if sweep else [override.get_value_element_as_str()]
                choices[key] = [f"{key}={value}" for value in values]
            jobs = [list(job) for job in itertools.product(*choices.values())]
        except HydraException:
            return  # a sweep only a sweeper plugin expands: each job validates itself
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
