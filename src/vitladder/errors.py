"""User-facing errors: one clear line that says what to do, never a traceback."""


class UserError(Exception):
    """A mistake the user can fix (bad input, missing data, unknown rung).

    Entry points catch it, print ``error: <message>`` on one line to stderr and exit with
    ``exit_code``; anything else is a bug and keeps its traceback.
    """

    exit_code = 2


class DataError(UserError):
    """Data that is missing, corrupted or laid out wrongly."""


class CheckpointError(UserError):
    """A checkpoint that is missing, truncated or not one this project wrote."""
