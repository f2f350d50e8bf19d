"""Weights & Biases: online when the user is logged in, offline otherwise, never a prompt."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from vitladder.errors import UserError

RUN_ID_FILE = "wandb_run_id.txt"
MODES = ("auto", "online", "offline", "disabled")
WANDB_ALIASES = ("dryrun", "run", "shared")  # wandb's own older names, passed through to it


def api_key() -> str | None:
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return read_netrc_auth(host=base_url())
    except Exception:  # an unreadable netrc is the same as not logged in
        return None


def logged_in() -> bool:
    return api_key() is not None


def base_url() -> str:
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")


def server_problem(url: str, key: str | None, timeout_s: float = 5.0) -> str | None:
    """Why online logging would fail, or None. Asks what wandb.init asks first (who the API key
    belongs to), with the same HTTP client, proxies and certificates, but a short time-out instead of
    its 90 s: a proxy, a captive portal, a server error or a bad key all show up here."""
    import requests

    try:
        response = requests.post(f"{url.rstrip('/')}/graphql", json={"query": "query { viewer { id } }"},
                                 auth=("api", key) if key else None, timeout=timeout_s)
    except requests.RequestException as error:
        return f"unreachable ({type(error).__name__})"
    if response.status_code in (401, 403):
        return f"rejected the API key (HTTP {response.status_code}; run `wandb login`)"
    if response.status_code != 200:
        return f"answered HTTP {response.status_code}"
    try:
        viewer = response.json()["data"]["viewer"]
    except (ValueError, KeyError, TypeError):
        return "answered something other than the W&B API"
    return None if viewer else "knows no user with this API key (run `wandb login`)"


def requested_mode(configured: str, source: str = "wandb.mode") -> str:
    """WANDB_MODE wins over the configured mode; either must be a mode W&B knows."""
    environment = os.environ.get("WANDB_MODE")
    mode = environment or configured
    if mode not in (*MODES, *WANDB_ALIASES):
        origin = "WANDB_MODE" if environment else source
        raise UserError(f"{origin}={mode!r} is not a W&B mode: use one of {', '.join(MODES)}")
    return mode


def check_wandb_mode(configured: str, source: str = "wandb.mode") -> None:
    """A bad mode is one line before anything is written (resolve_mode runs once the run folder exists)."""
    requested_mode(configured, source)


def resolve_mode(requested: str) -> str:
    """WANDB_MODE wins, then the config; `auto` is online only with credentials. Online without a
    working server falls back to offline with a warning, so training goes on (upload later with `wandb sync`)."""
    mode = requested_mode(requested)
    if mode == "auto":
        mode = "online" if logged_in() else "offline"
    if mode in ("online", "run", "shared") and (problem := server_problem(base_url(), api_key())):
        warnings.warn(
            f"W&B server {base_url()} {problem}: logging offline instead; upload later with `wandb sync`",
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
