"""Train (and analyse) one rung of the ladder: `python train.py step=warmup [overrides]`; `--help` for more."""

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vitladder.cli import check_command_line, reports_user_errors, require_rung
from vitladder.config import accept_plus_step, register_resolvers, validate


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
@reports_user_errors
def main(cfg: DictConfig) -> float:
    require_rung(cfg.rung)
    overrides = list(HydraConfig.get().overrides.task)
    validate(cfg, overrides)  # again in the job: a multirun or SLURM job may not come from this command line
    from vitladder.pipeline import train_rung  # heavy imports after Hydra has parsed the command line
    from vitladder.training.ranks import started_for_another_rank

    summary = train_rung(cfg, overrides=overrides)
    if not started_for_another_rank():  # rank 0 says it once
        print(f"{cfg.rung}: test accuracy {summary['test_acc']:.2%}, outputs in {cfg.run_dir}")
    return summary["test_acc"]


if __name__ == "__main__":
    register_resolvers()
    sys.argv = [sys.argv[0], *accept_plus_step(sys.argv[1:])]
    reports_user_errors(check_command_line)(sys.argv[1:])
    main()
