"""Train (and analyse) one rung of the ladder: `python train.py +step=warmup [overrides]`."""

import sys

import hydra
from omegaconf import DictConfig

from vitladder.cli import check_command_line, reports_user_errors, require_rung
from vitladder.config import check_types, register_resolvers


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
@reports_user_errors
def main(cfg: DictConfig) -> float:
    require_rung(cfg.rung)
    check_types(cfg)
    from vitladder.training.run import train_rung  # heavy imports after Hydra has parsed the command line

    summary = train_rung(cfg)
    print(f"{cfg.rung}: test accuracy {summary['test_acc']:.2%}, outputs in {cfg.run_dir}")
    return summary["test_acc"]


if __name__ == "__main__":
    register_resolvers()
    reports_user_errors(check_command_line)(sys.argv[1:])
    main()
