"""Which process of a run on several devices this is. Lightning's DDP launcher starts the other ranks by running
the same command again, inside rank 0's first fit; they train beside rank 0, which alone writes run folders and
does a ladder's own duties (its estimate, log, report, demo and W&B report run)."""

from __future__ import annotations

import os

# The launchers' variables: Lightning's (LOCAL_RANK, NODE_RANK), torchrun's (RANK), SLURM's and LSF's.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def started_for_another_rank() -> bool:
    """Whether a launcher started this process for a global rank other than 0. Read from the environment, so it
    is known before any Trainer exists (Lightning's own rank_zero_only.rank misses NODE_RANK until then)."""
    return any(os.environ.get(name, "0") != "0" for name in RANK_VARIABLES)
