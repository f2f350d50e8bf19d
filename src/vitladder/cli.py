"""What every entry point shares: user errors as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import functools
import sys
from typing import Callable, Sequence, TypeVar

from vitladder.config import RUNGS, check_rung, compose_rung, is_step_override
from vitladder.errors import UserError, describe_os_error

F = TypeVar("F", bound=Callable)


def fail(message: str, exit_code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(exit_code)


def reports_user_errors(func: F) -> F:
    """Turns a UserError into `error: <message>` on stderr and its exit code, and so does a read or
    write the system refused (an OSError: full disk, no permission), naming the path."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except UserError as error:
            fail(str(error), error.exit_code)
        except OSError as error:
            fail(describe_os_error(error))

    return wrapper  # type: ignore[return-value]


def check_command_line(argv: Sequence[str]) -> None:
    """Composes the run before Hydra does, so that an unknown rung, key or malformed value is one
    line naming the valid choices instead of Hydra's multi-line report."""
    overrides = [arg for arg in argv if "=" in arg and not arg.startswith("-") and not arg.startswith("hydra")]
    steps = [arg.partition("=")[2] for arg in overrides if is_step_override(arg)]
    for rung in ",".join(steps).split(","):  # multirun: +step=patch8,augment
        if rung.strip():
            check_rung(rung.strip())
    if any(arg in ("-m", "--multirun") for arg in argv) or len(steps) != 1 or "," in steps[0]:
        return  # sweeps are composed job by job; require_rung reports a missing rung
    rest = [arg for arg in overrides if not is_step_override(arg)]
    compose_rung(steps[0], rest)


def require_rung(rung: str) -> None:
    if rung not in RUNGS:
        raise UserError(f"choose a rung with +step=<rung>, one of {', '.join(RUNGS)}")
