"""Train (and analyse) one rung of the ladder: `python train.py step=warmup [overrides]`; `--help` for more."""

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vitladder.cli import check_job, reports_user_errors, run_app


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
@reports_user_errors
def main(cfg: DictConfig) -> float:
    check_job(cfg)
    from vitladder.pipeline import train_rung  # heavy imports after Hydra has parsed the command line
    from vitladder.training.run import started_for_another_rank

    summary = train_rung(cfg, overrides=list(HydraConfig.get().overrides.task))
    if not started_for_another_rank():  # rank 0 says it once
        print(f"{cfg.rung}: test accuracy {summary['test_acc']:.2%}, outputs in {cfg.run_dir}")
    return summary["test_acc"]


if __name__ == "__main__":
    run_app(main)
