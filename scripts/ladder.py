"""Train every rung of the ladder in order, skipping finished ones: what `make ladder` runs.

    python scripts/ladder.py [--seeds 0,1,2] [--data PATH|cifar10|synthetic] [--yes] [hydra overrides ...]

A ladder estimated at more than a day on this machine stops before training unless --yes is given.
"""

from __future__ import annotations

import argparse

from vitladder.cli import reports_user_errors
from vitladder.errors import UserError


def data_overrides(data: str) -> list[str]:
    """`make ladder DATA=...`: a source name, or a folder/archive for data=imagefolder."""
    from vitladder.data.sources import source_names

    data = data.strip()
    if not data:
        return []
    return [f"data={data}"] if data in source_names() else ["data=imagefolder", f"data.root={data}"]


def parse_seeds(text: str) -> list[int]:
    """`make ladder SEEDS=0,1,2`; none given: seed 0."""
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise UserError(f"SEEDS={text!r} is not a comma-separated list of integers, e.g. SEEDS=0,1,2") from None
    return seeds or [0]


@reports_user_errors
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds; every rung trains once per seed")
    parser.add_argument("--data", default="", help="cifar10, synthetic, or a folder/.tar(.xz) of train/ and test/")
    parser.add_argument(
        "--yes", action="store_true", help="train even when the estimate is beyond a day (the full recipe on a CPU)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. profile=smoke trainer.devices=2")
    args = parser.parse_args(argv)

    from vitladder.devtools.estimate import estimate_ladder
    from vitladder.pipeline import train_rung
    from vitladder.training.ladder import LONG_LADDER_S, plan_ladder, run_ladder, runs_to_train
    from vitladder.training.run import started_for_another_rank
    from vitladder.wandb.run import check_wandb_mode

    overrides = [*data_overrides(args.data), *args.overrides]
    runs = plan_ladder(parse_seeds(args.seeds), overrides)
    if started_for_another_rank():  # Lightning's DDP launcher ran this script again, for a rank other than 0
        # The runs rank 0 trains, in its order (the ranks meet in every fit), and nothing else. This rank starts inside
        # rank 0's first fit, so it plans from the files rank 0 planned from: rank 0 has finished no run since, and a
        # folder it moved aside for overwrite=true is still one to train.
        for run in runs_to_train(runs):
            train_rung(run.cfg, overrides=run.overrides)
        return
    check_wandb_mode(runs[0].cfg.wandb.mode)  # before the time estimate trains a few steps
    from vitladder.demo.export import export_demo
    from vitladder.report.ladder_report import build_report
    from vitladder.report.report_run import log_report_to_wandb

    summaries = run_ladder(runs, train_rung, estimate_ladder, max_seconds=None if args.yes else LONG_LADDER_S)
    cfg, ladder_dir = runs[0].cfg, runs[0].run_dir.parent
    final = next(run for run in runs if run.rung == runs[-1].rung)  # the top rung, first seed
    demo_failure = None
    if not (final.run_dir / "demo" / "index.html").exists():
        try:
            print(f"browser demo: {export_demo(final.run_dir)}")
        except Exception as error:  # the report and its W&B run come first; the command then fails with this
            demo_failure = error
    report = build_report(ladder_dir)
    log_report_to_wandb(
        ladder_dir, project=cfg.wandb.project, group=cfg.ladder, mode=cfg.wandb.mode, entity=cfg.wandb.entity
    )
    print(f"ladder '{cfg.ladder}' finished: {len(summaries)} runs; report in {report}")
    if demo_failure is not None:
        raise demo_failure


if __name__ == "__main__":
    main()
