"""Build and save a W&B Report of a ladder from code: what `make wandb-report` runs.

    python scripts/wandb_report.py outputs/full [--project NAME] [--entity NAME]

Needs W&B online (`wandb login`, a network) and the ladder's runs uploaded (`make wandb-sync` for
offline ones). Rebuilding updates the same Report (its address is kept in <ladder>/wandb_report_url.txt).
Prints the Report's address.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vitladder.cli import LADDER_DIR_HELP, ladder_folder, reports_user_errors


@reports_user_errors
def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ladder_dir", type=Path, help=LADDER_DIR_HELP)
    parser.add_argument("--project", default=None, help="W&B project (default: the runs' wandb.project)")
    parser.add_argument("--entity", default=None, help="W&B entity (default: the runs' wandb.entity, else yours)")
    args = parser.parse_args(argv)

    from vitladder.errors import UserError
    from vitladder.report.ladder_report import collect
    from vitladder.report.report_run import charts, rung_lines, wandb_names
    from vitladder.wandb.report import build_wandb_report, online_entity, save_wandb_report

    ladder_folder(args.ladder_dir)
    results = collect(args.ladder_dir)
    if not results:
        raise UserError(f"{args.ladder_dir}: no finished rung (no <rung>/done.json) to report on yet")
    project, entity, ladder = wandb_names(results, args.ladder_dir)
    project, entity = args.project or project, online_entity(args.entity or entity)
    report = build_wandb_report(project, entity, ladder, charts(results), rung_lines(results))
    url = save_wandb_report(args.ladder_dir, report)
    print(f"W&B Report of ladder '{ladder}': {url}")
    return url


if __name__ == "__main__":
    main()
