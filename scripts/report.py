"""Rebuild a ladder's report from its finished rungs: what `make report` runs.

    python scripts/report.py outputs/full [--wandb-mode auto|online|offline|disabled] [--project NAME]

Writes report.md, ladder.csv, distance_by_layer.png, entropy_by_layer.png, tracking_by_epoch.png and
explainer.png into the ladder folder, then logs them as a W&B run of job type "report" in the ladder's group.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vitladder.cli import LADDER_DIR_HELP, ladder_folder, reports_user_errors


@reports_user_errors
def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ladder_dir", type=Path, help=LADDER_DIR_HELP)
    parser.add_argument("--wandb-mode", default="auto", help="auto (online when logged in), online, offline, disabled")
    parser.add_argument("--project", default=None, help="W&B project (default: the runs' wandb.project)")
    parser.add_argument("--entity", default=None, help="W&B entity (default: yours)")
    args = parser.parse_args(argv)

    from vitladder.errors import UserError
    from vitladder.report.ladder_report import build_report, collect
    from vitladder.report.report_run import log_report_to_wandb
    from vitladder.wandb.run import check_wandb_mode

    check_wandb_mode(args.wandb_mode, source="--wandb-mode")  # before the report is written
    ladder_folder(args.ladder_dir)
    results = collect(args.ladder_dir)
    if not results:
        raise UserError(f"{args.ladder_dir}: no finished rung (no <rung>/done.json) to report on yet")
    report = build_report(args.ladder_dir)
    run_id = log_report_to_wandb(args.ladder_dir, project=args.project, mode=args.wandb_mode, entity=args.entity)
    logged = f"; W&B run {run_id}" if run_id else ""
    print(f"report of {len(results)} rungs ({sum(len(r.runs) for r in results)} runs) written to {report}{logged}")
    return report


if __name__ == "__main__":
    main()
