"""The W&B artifacts of a ladder, so that the lineage graph reads dataset -> rung run -> model -> report.

- ``dataset-<source>`` (type ``dataset``): an input of every rung run, as its source describes it
  (``data.sources.describe``: the source's keys in its metadata, and in its one small file ``dataset.json``
  the digest, sizes and classes of the arrays loaded), so a version is one set of images, whatever the
  source or the path it was read from; the images themselves are never uploaded.
- ``model-<ladder>-<rung>-seed<k>`` (type ``model``): ``checkpoints/model.safetensors`` (an older version's
  ``model.pt``), aliases ``latest`` and the rung.
- ``analysis-<ladder>-<rung>-seed<k>`` (type ``analysis``): the ``analysis/`` folder, the same aliases;
  a re-analysis logs a new version.
The report run uses the model and analysis artifacts of every rung it reports on.

Inputs (``declare_inputs``): online, ``use_artifact`` with the artifact built here from the same files,
hence the same digest, which W&B resolves to the version the producing run logged. W&B refuses
``use_artifact`` in an offline run (any form, wandb 0.31), so every run also lists its inputs in its
config (``inputs``: name, type, digest): offline that record is the lineage, and rebuilding the report
online after `make wandb-sync` draws the report's input edges.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from omegaconf import DictConfig

from vitladder.config import rung_index
from vitladder.data.sources import describe

__all__ = [
    "analysis_artifact",
    "artifact_name",
    "dataset_artifact",
    "declare_inputs",
    "input_record",
    "log_rung_artifacts",
    "model_artifact",
    "safe_name",
    "use_input",
]


def safe_name(name: str) -> str:
    """W&B artifact names take letters, digits, dashes, underscores and dots."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "unnamed"


def artifact_name(kind: str, ladder: str, rung: str, seed: int) -> str:
    return safe_name(f"{kind}-{ladder}-{rung}-seed{int(seed)}")


def _run_metadata(ladder: str, rung: str, seed: int) -> dict:
    return {"ladder": ladder, "rung": rung, "rung_index": rung_index(rung), "seed": int(seed)}


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


def model_artifact(model_path: Path, ladder: str, rung: str, seed: int, metadata: dict | None = None):
    import wandb

    artifact = wandb.Artifact(
        artifact_name("model", ladder, rung, seed),
        type="model",
        metadata={**_run_metadata(ladder, rung, seed), **(metadata or {})},
    )
    artifact.add_file(str(model_path), name=model_path.name)
    return artifact


def analysis_artifact(analysis_dir: Path, ladder: str, rung: str, seed: int):
    import wandb

    artifact = wandb.Artifact(
        artifact_name("analysis", ladder, rung, seed), type="analysis", metadata=_run_metadata(ladder, rung, seed)
    )
    artifact.add_dir(str(analysis_dir))
    return artifact


def use_input(run, artifact) -> bool:
    """Declares ``artifact`` an input of ``run`` where W&B can (online); returns whether it did."""
    if run.offline:
        return False
    run.use_artifact(artifact)
    return True


def input_record(artifacts: list) -> list[dict]:
    """What a run's config ``inputs`` says about its input artifacts: enough to find the logged version."""
    return [{"name": a.name, "type": a.type, "digest": a.digest} for a in artifacts]


def declare_inputs(run, artifacts: list) -> bool:
    """Records ``artifacts`` as the run's inputs in its config, and declares them to W&B where it can
    (online); returns whether W&B was told."""
    run.config.update({"inputs": input_record(artifacts)}, allow_val_change=True)
    for artifact in artifacts:
        use_input(run, artifact)
    return not run.offline


def log_rung_artifacts(run, cfg: DictConfig, model_path: Path, analysis_dir: Path, summary: dict) -> None:
    """Into a finished rung's run: the data set it used, the model and the analysis it made."""
    ladder, rung, seed = str(cfg.ladder), str(cfg.rung), int(cfg.seed)
    aliases = ["latest", rung]
    declare_inputs(run, [dataset_artifact(describe(cfg.data))])
    headline = {k: summary[k] for k in ("test_acc", "val_acc", "epochs", "layer1_distance_px") if k in summary}
    run.log_artifact(model_artifact(model_path, ladder, rung, seed, headline), aliases=aliases)
    if Path(analysis_dir).is_dir():
        run.log_artifact(analysis_artifact(analysis_dir, ladder, rung, seed), aliases=aliases)
