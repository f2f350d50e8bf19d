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

URL_FILE = "wandb_report_url.txt"


@reports_user_errors
def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ladder_dir", type=Path, help=LADDER_DIR_HELP)
    parser.add_argument("--project", default=None, help="W&B project (default: the runs' wandb.project)")
    parser.add_argument("--entity", default=None, help="W&B entity (default: the runs' wandb.entity, else yours)")
    args = parser.parse_args(argv)

    from vitladder.atomic import write_text
    from vitladder.errors import UserError
    from vitladder.report.ladder_report import collect
    from vitladder.training.wandb_run import api_key, base_url, server_problem

    ladder_folder(args.ladder_dir)
    results = collect(args.ladder_dir)
    if not results:
        raise UserError(f"{args.ladder_dir}: no finished rung (no <rung>/done.json) to report on yet")
    problem = "not logged in" if api_key() is None else server_problem(base_url(), api_key())
    if problem:
        where = problem if api_key() is None else f"W&B server {base_url()} {problem}"
        raise UserError(
            f"a saved W&B Report needs W&B online ({where}): run `wandb login` on a machine with a network, "
            "upload offline runs with `make wandb-sync`, then `make wandb-report` again"
        )
    import wandb
    import wandb_workspaces.reports.v2 as wr

    from vitladder.report.wandb_workspace import build_wandb_report

    config = next((run.config for r in results for run in r.runs if run.config), {})
    project = args.project or config.get("wandb", {}).get("project") or "vit-ladder"
    entity = args.entity or config.get("wandb", {}).get("entity") or wandb.Api().default_entity
    ladder = config.get("ladder") if isinstance(config.get("ladder"), str) else args.ladder_dir.name
    report = build_wandb_report(project, entity, ladder, results)
    url_file = args.ladder_dir / URL_FILE
    if url_file.exists():  # rebuilding: update the Report made last time, if it still exists
        try:
            existing = wr.Report.from_url(url_file.read_text().strip())
            existing.title, existing.description, existing.blocks = report.title, report.description, report.blocks
            report = existing
        except Exception:  # deleted or not readable: make a new one
            pass
    report.save()
    write_text(url_file, report.url + "\n")
    print(f"W&B Report of ladder '{ladder}': {report.url}")
    return report.url


if __name__ == "__main__":
    main()
