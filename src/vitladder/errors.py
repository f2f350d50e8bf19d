"""User-facing errors: one clear line that says what to do, never a traceback."""

import errno


class UserError(Exception):
    """A mistake the user can fix: the entry points print ``error: <message>`` and exit with ``exit_code``
    (cli.reports_user_errors); anything else is a bug, with its traceback."""

    exit_code = 2


class DataError(UserError):
    """Data that is missing, corrupted or laid out wrongly."""


class CheckpointError(UserError):
    """A checkpoint that is missing, truncated or not one this project wrote."""


def describe_os_error(error: OSError) -> str:
    """One line for a read or write the system refused (full disk, no permission): which path, why, what to do."""
    where = " -> ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
    reason = error.strerror or str(error) or type(error).__name__
    advice = "check the path and the disk, then run the same command again"
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        advice = "free some disk space or write elsewhere, then run the same command again"
        advice += " (an interrupted rung resumes from its last checkpoint)"
    elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        advice = "make it writable or write elsewhere (output_root=PATH, --out DIR)"
    return f"{where}: {reason}; {advice}" if where else f"{reason}; {advice}"
