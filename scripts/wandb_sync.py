"""Upload a ladder's offline W&B runs with `wandb sync`: what `make wandb-sync` runs.

    python scripts/wandb_sync.py outputs/full

Uploads every rung's run (a resumed rung's parts, in the order they started, as one run) and the report
run. Runs of an old recipe, set aside by overwrite=true in <rung>.replaced-<time>/, stay local.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from vitladder.cli import LADDER_DIR_HELP, ladder_folder, reports_user_errors


@reports_user_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ladder_dir", type=Path, help=LADDER_DIR_HELP)
    args = parser.parse_args(argv)

    from vitladder.errors import UserError
    from vitladder.wandb.run import offline_runs

    ladder_folder(args.ladder_dir)
    runs = offline_runs(args.ladder_dir)
    if not runs:
        raise UserError(f"{args.ladder_dir}: no offline W&B run to upload (online runs are uploaded as they log)")
    return subprocess.run([sys.executable, "-m", "wandb", "sync", *map(str, runs)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
