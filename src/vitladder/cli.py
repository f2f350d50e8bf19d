"""What every entry point shares: user errors as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import functools
import sys
from typing import Callable, Sequence, TypeVar

from vitladder.config import RUNGS, check_rung
from vitladder.errors import UserError

F = TypeVar("F", bound=Callable)


def fail(message: str, exit_code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(exit_code)


def reports_user_errors(func: F) -> F:
    """Turns a UserError into `error: <message>` on stderr and its exit code."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except UserError as error:
            fail(str(error), error.exit_code)

    return wrapper  # type: ignore[return-value]


def check_step_overrides(argv: Sequence[str]) -> None:
    """Names the valid rungs before Hydra prints a multi-line 'could not find' for a typo."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+~") == "step":
            for rung in value.split(","):  # multirun: +step=patch8,augment
                check_rung(rung.strip())


def require_rung(rung: str) -> None:
    if rung not in RUNGS:
        raise UserError(f"choose a rung with +step=<rung>, one of {', '.join(RUNGS)}")
