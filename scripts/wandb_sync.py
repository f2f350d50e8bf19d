"""Upload a ladder's offline W&B runs with `wandb sync`: what `make wandb-sync` runs.

    python scripts/wandb_sync.py outputs/full

Uploads every rung's run (a resumed rung's parts, in the order they started, as one run) and the report
run. Runs of an old recipe, set aside by overwrite=true in <rung>.replaced-<time>/, stay local. A rung in use
(being trained or analysed) is left for the next upload: `wandb sync` marks what it uploaded and never uploads it
again, so the rest of a run still being written would never reach W&B.
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
    from vitladder.training.recipe import RunLocked, run_lock
    from vitladder.wandb.run import offline_runs

    ladder_folder(args.ladder_dir)
    runs = offline_runs(args.ladder_dir)
    if not runs:
        raise UserError(f"{args.ladder_dir}: no offline W&B run to upload (online runs are uploaded as they log)")
    for rung_dir in sorted({run.parents[1] for run in runs} - {args.ladder_dir}):
        try:
            with run_lock(rung_dir):  # free now: a training that starts later writes a new offline run
                pass
        except RunLocked:
            runs = [run for run in runs if run.parents[1] != rung_dir]
            print(
                f"warning: {rung_dir} is in use by another process: its W&B run is left for the next upload",
                file=sys.stderr,
            )
    if not runs:
        raise UserError(
            f"{args.ladder_dir}: its offline W&B runs are all in use by another process: upload when it is done"
        )
    return subprocess.run([sys.executable, "-m", "wandb", "sync", *map(str, runs)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
