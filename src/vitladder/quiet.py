"""A run prints what it does and real warnings, each on one line; not the libraries' tips and notes about their own
code. Each filter names one message of one library, so anything else still shows: Lightning's tips to install its
cloud products (every Trainer prints them), torch's deprecation of ``LeafSpec``, which Lightning's own
``utilities/_pytree.py`` still builds at every fit and test (Lightning 2.6 with torch 2.10 and later), and
"Checkpoint directory ... exists and is not empty" (every resume finds its last.ckpt there, by design). W&B's note
that the ``anonymous`` setting has no effect never comes: the project starts its W&B runs itself (wandb/run.py)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

LIGHTNING_INFO = "lightning.pytorch.utilities.rank_zero"  # the logger of Lightning's rank_zero_info
TIP = "💡 Tip: "
PACKAGE = Path(__file__).resolve().parent


def drop_tips(record: logging.LogRecord) -> bool:
    """Lightning's product tips, and nothing else it logs."""
    return not str(record.msg).startswith(TIP)


def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, line=None) -> str:
    """A warning as one line: ``warning: <message>`` for this project's, with the place and category for others'."""
    text = " ".join(str(message).split())
    if Path(filename).resolve().is_relative_to(PACKAGE):
        return f"warning: {text}\n"
    return f"{filename}:{lineno}: {category.__name__}: {text}\n"


def quiet_libraries() -> None:
    """Installs the filters above and the one-line format (idempotent: Python replaces an equal filter)."""
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
    warnings.filterwarnings(
        "ignore",
        message=r"Checkpoint directory .* exists and is not empty",
        module=r"lightning\.pytorch\.callbacks\.model_checkpoint",
    )
    logger = logging.getLogger(LIGHTNING_INFO)
    logger.addFilter(drop_tips)  # once: a logger keeps one of each filter
    warnings.formatwarning = one_line
