"""W&B runs: online when W&B finds credentials, offline otherwise, never a prompt. One run per rung folder (its id
in ``wandb_run_id.txt``, so a resumed rung, or a re-analysis, continues it); offline, a resumed run adds a folder
``<run>/wandb/offline-run-*`` with the same id, and ``wandb sync`` uploads the parts of one run in order."""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from vitladder.atomic import write_text
from vitladder.config import rung_index
from vitladder.config_schema import WANDB_ALIASES, WANDB_MODES
from vitladder.errors import UserError
from vitladder.run_folder import EPOCH, LR, parse_run_name

RUN_ID_FILE = "wandb_run_id.txt"
GLOBAL_STEP = "trainer/global_step"  # Lightning's WandbLogger logs the optimizer step under this name
ONLINE = ("online", "run", "shared")
# W&B waits 90 s for a server by default: training starts offline sooner. WANDB_INIT_TIMEOUT, W&B's own, wins.
INIT_TIMEOUT_S = 10.0


def check_wandb_mode(configured: str, source: str = "wandb.mode") -> str:
    """WANDB_MODE, else the configured mode, checked before anything is written (W&B refuses it only in training)."""
    environment = os.environ.get("WANDB_MODE")
    mode = environment or configured
    if mode not in (*WANDB_MODES, *WANDB_ALIASES):
        origin = "WANDB_MODE" if environment else source
        raise UserError(f"{origin}={mode!r} is not a W&B mode: use one of {', '.join(WANDB_MODES)}")
    return mode


def resolve_mode(requested: str) -> str:
    """The requested mode; `auto` is online only where W&B finds credentials (it never prompts for them here)."""
    mode = check_wandb_mode(requested)
    if mode == "auto":
        import wandb

        try:
            mode = "online" if wandb.login(prompt=False, verify=False) else "offline"
        except wandb.Error:  # credentials W&B cannot use (a malformed key): wandb.init says so, and falls back
            mode = "online"
    return mode


def init_timeout_s() -> float:
    return float(os.environ.get("WANDB_INIT_TIMEOUT", INIT_TIMEOUT_S))


def start_run(mode: str, **init):
    """``wandb.init(**init)``; online, a server that does not start the run in time (unreachable, an error, a
    rejected key) is one warning line and the run is offline: training goes on, `wandb sync` uploads it later."""
    import wandb

    if mode in ONLINE:
        try:
            return wandb.init(mode=mode, settings=wandb.Settings(init_timeout=init_timeout_s()), **init)
        except wandb.Error as error:
            warnings.warn(
                f"W&B could not start the run online ({failure(error)}): logging offline instead; "
                "upload later with `wandb sync`",
                stacklevel=2,
            )
            mode = "offline"
    return wandb.init(mode=mode, **init)


def report_run_id(project: str, ladder: str) -> str:
    """Derived from project and ladder: rebuilding the report updates one run instead of adding one per build."""
    return "report-" + hashlib.sha256(f"{project}/{ladder}".encode()).hexdigest()[:16]


def wandb_config(cfg: DictConfig) -> dict:
    """The resolved Hydra config and the rung's position in the ladder, to order rungs by; without rung_info (every
    rung's description and reference figures: not settings to filter runs by)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("rung_info", None)
    return {**config, "rung_index": rung_index(cfg.rung)}


def define_metrics(run) -> None:
    """Epoch-level metrics against ``epoch`` (epochs trained), ``lr`` against the optimizer step."""
    run.define_metric(EPOCH)
    run.define_metric(GLOBAL_STEP)
    run.define_metric("*", step_metric=EPOCH, step_sync=True)
    run.define_metric(LR, step_metric=GLOBAL_STEP)


def rung_run(cfg: DictConfig, run_dir: Path, mode: str, resume_only: bool = False, **init):
    """The rung folder's W&B run, continued when it has one, else started (``resume_only``: None); None: disabled."""
    id_file, mode = Path(run_dir) / RUN_ID_FILE, resolve_mode(mode)
    existing = id_file.read_text().strip() if id_file.exists() else None
    if mode == "disabled" or (resume_only and existing is None):
        return None
    run = start_run(
        mode,
        project=cfg.wandb.project,
        entity=cfg.wandb.entity,
        group=cfg.ladder,
        name=f"{cfg.ladder}/{Path(run_dir).name}",
        job_type=cfg.rung,
        tags=[cfg.rung, f"profile:{cfg.profile.name}", f"data:{cfg.data.source}", f"seed:{cfg.seed}"],
        id=existing,
        resume="allow",
        dir=str(run_dir),
        **init,
    )
    if existing is None:
        write_text(id_file, run.id + "\n")
    define_metrics(run)
    return run


def make_logger(cfg: DictConfig, run_dir: Path) -> WandbLogger | None:
    run = rung_run(cfg, run_dir, cfg.wandb.mode, config=wandb_config(cfg))
    return None if run is None else WandbLogger(experiment=run, save_dir=str(run_dir))


def offline_runs(ladder_dir: Path) -> list[Path]:
    """What `make wandb-sync` uploads: the offline runs of the ladder's run folders and its report run. Runs set
    aside by ``overwrite=true`` in ``<rung>.replaced-<time>/`` are an old recipe's, not the ladder's."""
    ladder_dir = Path(ladder_dir)
    run_folders = [path for path in ladder_dir.iterdir() if path.is_dir() and parse_run_name(path.name)]
    runs = [run for root in (*run_folders, ladder_dir) for run in (root / "wandb").glob("offline-run-*")]
    return sorted(run for run in runs if run.is_dir())


def failure(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


@contextmanager
def finished_if_failed() -> Iterator[None]:
    """Closes the W&B run as failed when training raises, so no later run of the process meets it open; W&B itself
    failing (the server, the network) is one line: the rung resumes from its checkpoint."""
    try:
        yield
    except BaseException as error:
        wandb = sys.modules.get("wandb")  # never imported: no run to close
        if wandb is None:
            raise
        with suppress(wandb.Error, OSError):  # if W&B can still close its run
            wandb.finish(exit_code=1)
        if isinstance(error, wandb.Error):
            raise UserError(
                f"W&B failed during training ({failure(error)}): run the same command again to resume from the "
                "last checkpoint, or train without it (wandb.mode=offline, or disabled)"
            ) from error
        raise


@contextmanager
def wandb_failure_warns(what: str, kept: str) -> Iterator[None]:
    """For the W&B steps after training, whose results are saved first: W&B failing (its errors, the network, its
    files) is one warning that ``what`` was not logged and what is ``kept``; the caller goes on (a decorated
    function returns None). Anything else propagates."""
    import wandb

    try:
        yield
    except (wandb.Error, OSError) as error:
        with suppress(wandb.Error, OSError):
            wandb.finish(exit_code=1)
        warnings.warn(f"W&B could not log {what} ({failure(error)}): {kept}", stacklevel=1)
