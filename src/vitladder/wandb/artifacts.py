"""The W&B artifacts of a ladder, so that the lineage graph reads dataset -> rung run -> model -> report.

- ``dataset-<source>``: an input of every rung run, its identity (``data.sources.describe``) in one small file
  ``dataset.json``, so a version is one set of images whatever the path it was read from; the images are never
  uploaded.
- ``model-<ladder>-<rung>-seed<k>``: the final model; ``analysis-<ladder>-<rung>-seed<k>``: the ``analysis/`` folder
  (a re-analysis logs a new version). Aliases ``latest`` and the rung.

W&B refuses ``use_artifact`` in an offline run (any form, wandb 0.31), so every run also lists its inputs in its
config (``inputs``: name, type, digest): offline that record is the lineage. Online, an input is the artifact built
here from the same files, hence the same digest, which W&B resolves to the version the producing run logged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig

from vitladder.config import rung_index
from vitladder.run_folder import RunPaths, final_model


def safe_name(name: str) -> str:
    """W&B artifact names take letters, digits, dashes, underscores and dots."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "unnamed"


def rung_artifact(kind: str, path: Path, ladder: str, rung: str, seed: int, metadata: dict | None = None):
    """``<kind>-<ladder>-<rung>-seed<k>`` holding ``path``, a file (the model) or a folder (the analysis)."""
    import wandb

    metadata = {"ladder": ladder, "rung": rung, "rung_index": rung_index(rung), "seed": int(seed), **(metadata or {})}
    artifact = wandb.Artifact(safe_name(f"{kind}-{ladder}-{rung}-seed{int(seed)}"), type=kind, metadata=metadata)
    if Path(path).is_dir():
        artifact.add_dir(str(path))
    else:
        artifact.add_file(str(path))
    return artifact


def log_rung_artifact(run, cfg: DictConfig, kind: str, path: Path, metadata: dict | None = None) -> None:
    artifact = rung_artifact(kind, path, str(cfg.ladder), str(cfg.rung), int(cfg.seed), metadata)
    run.log_artifact(artifact, aliases=["latest", str(cfg.rung)])


def dataset_artifact(record: dict):
    """The data set described by ``record`` (``data.sources.describe``) as an artifact: its identity (source,
    digest, sizes, classes) in ``dataset.json``, so W&B's digest changes exactly when the images do."""
    import wandb

    artifact = wandb.Artifact(
        safe_name(f"dataset-{record['source']}"),
        type="dataset",
        metadata=record,
        description=f"the {record['source']} data set, identified by the digest of its arrays (not uploaded)",
    )
    with artifact.new_file("dataset.json") as file:
        json.dump({key: value for key, value in record.items() if key != "config"}, file, sort_keys=True)
    return artifact


def run_artifacts(ladder: str, runs: Iterable[tuple[str, int, Path]]) -> list:
    """The model and analysis artifact of every (rung, seed, run folder), built from its files: the same digests as
    the versions the rung runs logged (a re-analysis logs the new folder), so W&B finds those."""
    artifacts = []
    for rung, seed, folder in runs:
        for kind, path in (("model", final_model(folder)), ("analysis", RunPaths(folder).analysis)):
            if path is not None and path.exists():
                artifacts.append(rung_artifact(kind, path, ladder, rung, seed))
    return artifacts


def declare_inputs(run, artifacts: list) -> None:
    """Records ``artifacts`` as the run's inputs in its config, and declares them to W&B where it can (online)."""
    inputs = [{"name": a.name, "type": a.type, "digest": a.digest} for a in artifacts]
    run.config.update({"inputs": inputs}, allow_val_change=True)  # a rebuilt report run's inputs change
    for artifact in [] if run.offline else artifacts:
        run.use_artifact(artifact)


def log_rung_artifacts(run, cfg: DictConfig, dataset: dict, model_path: Path, analysis_dir: Path, summary: dict):
    """Into a finished rung's run: the data set it used (``dataset``: its record), the model and the analysis."""
    declare_inputs(run, [dataset_artifact(dataset)])
    headline = {k: summary[k] for k in ("test_acc", "val_acc", "epochs", "layer1_distance_px") if k in summary}
    log_rung_artifact(run, cfg, "model", model_path, headline)
    if Path(analysis_dir).is_dir():
        log_rung_artifact(run, cfg, "analysis", analysis_dir)
