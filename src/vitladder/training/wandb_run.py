"""Weights & Biases: online when the user is logged in, offline otherwise, never a prompt.

One W&B run per rung folder (its id in ``wandb_run_id.txt``, so a resumed rung, or a re-analysis,
continues it), epoch-level metrics against ``epoch`` and the learning rate against the optimizer
step (``define_metrics``). Offline runs stay in ``<run>/wandb/offline-run-*``: a resumed run adds a
folder with the same id, and ``wandb sync`` uploads the parts of one run in order (``offline_runs``).
"""

from __future__ import annotations

import hashlib
import netrc
import os
import secrets
import string
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from vitladder.config import rung_index
from vitladder.config_schema import WANDB_ALIASES
from vitladder.config_schema import WANDB_MODES as MODES
from vitladder.errors import UserError
from vitladder.run_folder import parse_run_name
from vitladder.training.axes import EPOCH, LR

RUN_ID_FILE = "wandb_run_id.txt"
GLOBAL_STEP = "trainer/global_step"  # Lightning's WandbLogger logs the optimizer step under this name
EPOCH_METRICS = ("train/*", "val/*", "test/*", "track/*", "analysis/*")


def api_key() -> str | None:
    """The API key in WANDB_API_KEY or in the netrc file `wandb login` writes, for the W&B host.

    Read with the standard library: W&B's own netrc reader is private. Without WANDB_BASE_URL the
    key may be stored under W&B's default host (``wandb.Settings().base_url``) as well as ours."""
    if os.environ.get("WANDB_API_KEY"):
        return os.environ["WANDB_API_KEY"]
    import wandb

    hosts = {urlsplit(base_url()).netloc}
    if not os.environ.get("WANDB_BASE_URL"):
        hosts.add(urlsplit(wandb.Settings().base_url).netloc)
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        entries = netrc.netrc(str(path))
    except (OSError, netrc.NetrcParseError):  # no file, or an unreadable one: not logged in
        return None
    keys = [auth[2] for host in sorted(hosts) if host and (auth := entries.authenticators(host)) and auth[2]]
    return keys[0] if keys else None


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
        response = requests.post(
            f"{url.rstrip('/')}/graphql",
            json={"query": "query { viewer { id } }"},
            auth=("api", key) if key else None,
            timeout=timeout_s,
        )
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


def new_run_id(length: int = 8) -> str:
    """A random W&B run id (base 36, as W&B makes them)."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(length))


def stored_run_id(run_dir: Path) -> str | None:
    """The id of the rung folder's W&B run, or None when it never had one."""
    path = Path(run_dir) / RUN_ID_FILE
    return path.read_text().strip() if path.exists() else None


def run_id(run_dir: Path) -> str:
    """One W&B run per rung folder: a resumed rung continues the same run."""
    existing = stored_run_id(run_dir)
    if existing:
        return existing
    from vitladder.atomic import write_text

    new_id = new_run_id()
    write_text(Path(run_dir) / RUN_ID_FILE, new_id + "\n")
    return new_id


def report_run_id(project: str, ladder: str) -> str:
    """The ladder report run's id: derived from project and ladder, so rebuilding the report updates
    one run instead of adding one per build."""
    return "report-" + hashlib.sha256(f"{project}/{ladder}".encode()).hexdigest()[:16]


def rung_run(cfg: DictConfig, run_dir: Path) -> dict:
    """What names a rung's W&B run; the same when training and when a re-analysis resumes it."""
    return dict(
        project=cfg.wandb.project,
        entity=cfg.wandb.entity,
        group=cfg.ladder,
        name=f"{cfg.ladder}/{Path(run_dir).name}",
        job_type=cfg.rung,
        tags=[cfg.rung, f"profile:{cfg.profile.name}", f"data:{cfg.data.source}", f"seed:{cfg.seed}"],
    )


def wandb_config(cfg: DictConfig) -> dict:
    """The run's W&B config: the resolved Hydra config, plus the rung's position in the ladder so that
    dashboards can order rungs. rung_info (descriptions and reference figures of every rung below) is
    left out: not settings to filter runs by."""
    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("rung_info", None)
    return {**config, "rung_index": rung_index(cfg.rung)}


def make_logger(cfg: DictConfig, run_dir: Path) -> WandbLogger | None:
    """The rung's W&B logger, or None when W&B is disabled (then no W&B run is made)."""
    mode = resolve_mode(cfg.wandb.mode)
    if mode == "disabled":
        return None
    logger = WandbLogger(
        **rung_run(cfg, run_dir),
        config=wandb_config(cfg),
        save_dir=str(run_dir),
        id=run_id(run_dir),
        resume="allow",
        mode=mode,
    )
    # Lightning passes anonymous=None to wandb.init, and wandb 0.31 answers any value with a deprecation
    # warning (the setting does nothing now): not passing it is what wandb asks for. WandbLogger keeps
    # wandb.init's arguments in a private dict; tests/training/test_wandb_run.py pins it.
    getattr(logger, "_wandb_init", {}).pop("anonymous", None)
    return logger


def define_metrics(run) -> None:
    """Epoch-level metrics against ``epoch`` (epochs trained), ``lr`` against the optimizer step.

    Lightning's WandbLogger defines ``*`` against ``trainer/global_step``; redefining ``*`` replaces
    that default (W&B picks among matching globs in no fixed order, so no other glob may disagree)."""
    run.define_metric(EPOCH)
    run.define_metric(GLOBAL_STEP)
    for pattern in ("*", *EPOCH_METRICS):
        run.define_metric(pattern, step_metric=EPOCH, step_sync=True)
    run.define_metric(LR, step_metric=GLOBAL_STEP)


class WandbAxes(L.Callback):
    """Applies ``define_metrics`` to the trainer's W&B run before anything is logged."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                if isinstance(logger, WandbLogger):
                    define_metrics(logger.experiment)


def resume_rung_run(cfg: DictConfig, run_dir: Path, mode: str):
    """The rung's own W&B run, continued (offline: a new part with the same id), or None when the rung
    never had one or W&B is disabled. For updates after training, e.g. a re-analysis."""
    import wandb

    existing = stored_run_id(run_dir)
    mode = resolve_mode(mode)
    if existing is None or mode == "disabled":
        return None
    run = wandb.init(**rung_run(cfg, run_dir), id=existing, resume="allow", dir=str(run_dir), mode=mode)
    define_metrics(run)
    return run


def offline_runs(ladder_dir: Path) -> list[Path]:
    """The offline W&B runs of a ladder, what `make wandb-sync` uploads: its run folders' (a resumed rung's
    parts, which `wandb sync` uploads in the order they started, as one run) and the report run's. Runs of
    an old recipe, set aside by ``overwrite=true`` in ``<rung>.replaced-<time>/``, are not the ladder's."""
    ladder_dir = Path(ladder_dir)
    run_folders = [path for path in ladder_dir.iterdir() if path.is_dir() and parse_run_name(path.name)]
    runs = [run for root in (*run_folders, ladder_dir) for run in (root / "wandb").glob("offline-run-*")]
    return sorted(run for run in runs if run.is_dir())


def _failure(error: BaseException) -> str:
    """A W&B failure in a few words: its type and the first line of its message."""
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _finish_failed(wandb) -> None:
    """Marks the open W&B run failed and closes it, if W&B can still do that."""
    if wandb.run is not None:
        with suppress(wandb.Error, OSError):
            wandb.run.finish(exit_code=1)


@contextmanager
def finished_if_failed() -> Iterator[None]:
    """Marks the W&B run failed and closes it when training raises. Lightning's WandbLogger never
    finishes its run, and a later WandbLogger in the same process would attach to the open one.
    W&B failing during training (its own errors: the server, the network) is one line: the rung resumes
    from its last checkpoint."""
    try:
        yield
    except BaseException as error:
        wandb = sys.modules.get("wandb")  # never imported: no run to close
        if wandb is None:
            raise
        _finish_failed(wandb)
        if isinstance(error, wandb.Error):
            raise UserError(
                f"W&B failed during training ({_failure(error)}): run the same command again to resume from the "
                "last checkpoint, or train without it (wandb.mode=offline, or disabled)"
            ) from error
        raise


@contextmanager
def wandb_failure_warns(what: str, kept: str) -> Iterator[None]:
    """For the W&B steps after training, whose results are saved locally first: a failure of W&B itself (its
    errors, the network, its files) is one warning line saying that ``what`` was not logged and what is
    ``kept``, and the caller goes on (as a decorator: returns None). Anything else propagates."""
    import wandb

    try:
        yield
    except (wandb.Error, OSError) as error:
        _finish_failed(wandb)
        warnings.warn(f"W&B could not log {what} ({_failure(error)}): {kept}", stacklevel=1)
