"""Weights & Biases: online when the user is logged in, offline otherwise, never a prompt."""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

RUN_ID_FILE = "wandb_run_id.txt"


def logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return read_netrc_auth(host=os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")) is not None
    except Exception:  # an unreadable netrc is the same as not logged in
        return False


def resolve_mode(requested: str) -> str:
    """WANDB_MODE wins, then the config; `auto` is online only with credentials."""
    mode = os.environ.get("WANDB_MODE") or requested
    if mode == "auto":
        return "online" if logged_in() else "offline"
    return mode


def run_id(run_dir: Path) -> str:
    """One W&B run per rung folder: a resumed rung continues the same run."""
    from wandb.sdk.lib.runid import generate_id

    path = run_dir / RUN_ID_FILE
    if path.exists():
        return path.read_text().strip()
    from vitladder.atomic import write_text

    new_id = generate_id()
    write_text(path, new_id + "\n")
    return new_id


def make_logger(cfg: DictConfig, run_dir: Path) -> WandbLogger:
    mode = resolve_mode(cfg.wandb.mode)
    name = run_dir.name
    return WandbLogger(
        project=cfg.wandb.project,
        entity=cfg.wandb.entity,
        group=cfg.ladder,
        name=f"{cfg.ladder}/{name}",
        job_type=cfg.rung,
        tags=[cfg.rung, f"profile:{cfg.profile.name}", f"data:{cfg.data.source}", f"seed:{cfg.seed}"],
        config=OmegaConf.to_container(cfg, resolve=True),
        save_dir=str(run_dir),
        id=run_id(run_dir),
        resume="allow",
        mode=mode,
    )
