"""The W&B artifacts of a ladder, so that the lineage graph reads dataset -> rung run -> model -> report.

- ``dataset-<name>`` (type ``dataset``): an input of every rung run, declared by reference, never
  uploaded. A file or torchvision's CIFAR-10 folder is referenced with W&B's checksum (a new version
  when its content changes); a folder of images by its path only (checksumming thousands of files
  into every run's manifest would cost more than it tells); the synthetic set by its generator
  parameters, in its name.
- ``model-<ladder>-<rung>-seed<k>`` (type ``model``): ``checkpoints/model.pt``, aliases ``latest`` and the rung.
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

import re
from pathlib import Path

from omegaconf import DictConfig

from vitladder.config import rung_index

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


def dataset_artifact(data_cfg: DictConfig):
    """The source data set as a reference artifact (nothing is uploaded)."""
    import wandb

    source = str(data_cfg.source)
    metadata: dict = {"source": source}
    path: Path | None = None
    checksum = False
    if source == "cifar10":
        root = Path(str(data_cfg.root)).expanduser()
        path = root if root.name == "cifar-10-batches-py" else root / "cifar-10-batches-py"
        name, checksum = "dataset-cifar10", True  # eight batch files: cheap to checksum
    elif source == "imagefolder":
        path = Path(str(data_cfg.root)).expanduser()
        name, checksum = f"dataset-{path.name.split('.')[0] or 'images'}", path.is_file()
    else:
        params = {
            "num_train": int(data_cfg.num_train),
            "num_test": int(data_cfg.num_test),
            "seed": int(data_cfg.get("seed", 0)),
        }
        metadata.update(params)
        name = f"dataset-{source}-{params['num_train']}-{params['num_test']}-seed{params['seed']}"
    if path is not None:
        metadata["path"] = str(path.resolve())
    artifact = wandb.Artifact(
        safe_name(name),
        type="dataset",
        metadata=metadata,
        description=f"the {source} data set, referenced where it lives, not uploaded",
    )
    if path is not None and path.exists():
        artifact.add_reference(path.resolve().as_uri(), name=path.name, checksum=checksum)
    return artifact


def model_artifact(model_path: Path, ladder: str, rung: str, seed: int, metadata: dict | None = None):
    import wandb

    artifact = wandb.Artifact(
        artifact_name("model", ladder, rung, seed),
        type="model",
        metadata={**_run_metadata(ladder, rung, seed), **(metadata or {})},
    )
    artifact.add_file(str(model_path), name="model.pt")
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
    declare_inputs(run, [dataset_artifact(cfg.data)])
    headline = {k: summary[k] for k in ("test_acc", "val_acc", "epochs", "layer1_distance_px") if k in summary}
    run.log_artifact(model_artifact(model_path, ladder, rung, seed, headline), aliases=aliases)
    if Path(analysis_dir).is_dir():
        run.log_artifact(analysis_artifact(analysis_dir, ladder, rung, seed), aliases=aliases)
