"""Weights & Biases: online when the user is logged in, offline otherwise, never a prompt."""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

RUN_ID_FILE = "wandb_run_id.txt"


def logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return read_netrc_auth(host=base_url()) is not None
    except Exception:  # an unreadable netrc is the same as not logged in
        return False


def base_url() -> str:
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")


def reachable(url: str, timeout_s: float = 3.0) -> bool:
    """Whether the W&B server accepts a TCP connection: cheaper than wandb.init's 90 s time-out."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def resolve_mode(requested: str) -> str:
    """WANDB_MODE wins, then the config; `auto` is online only with credentials. Online without a
    network falls back to offline with a warning, so training goes on (upload later with `wandb sync`)."""
    mode = os.environ.get("WANDB_MODE") or requested
    if mode == "auto":
        mode = "online" if logged_in() else "offline"
    if mode == "online" and not reachable(base_url()):
        warnings.warn(
            f"W&B server {base_url()} unreachable: logging offline instead; upload later with `wandb sync`",
            stacklevel=2,
        )
        mode = "offline"
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


@contextmanager
def finished_if_failed() -> Iterator[None]:
    """Marks the W&B run failed and closes it when training raises. Lightning's WandbLogger never
    finishes its run, and a later WandbLogger in the same process would attach to the open one."""
    try:
        yield
    except BaseException:
        import wandb

        if wandb.run is not None:
            wandb.run.finish(exit_code=1)
        raise
