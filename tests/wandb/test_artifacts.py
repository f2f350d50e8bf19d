"""The W&B artifacts read back from a rung's offline records, and built as a run of any state would build them."""

from __future__ import annotations

from pathlib import Path

from extensions import add_stripes_source

from vitladder.data.sources import describe
from vitladder.run_folder import RunPaths
from vitladder.wandb.artifacts import dataset_artifact, declare_inputs, log_rung_artifacts, run_artifacts


def test_model_and_analysis_artifacts_with_rung_aliases(smoke_ladder, wandb_run_reader) -> None:
    run = wandb_run_reader(next((smoke_ladder / "patch4" / "wandb").glob("offline-run-*")))
    artifacts = {a["name"]: a for a in run.artifacts}
    model, analysis = artifacts["model-smoke-patch4-seed0"], artifacts["analysis-smoke-patch4-seed0"]
    assert model["type"] == "model" and set(model["aliases"]) == {"latest", "patch4"}
    assert [e["path"] for e in model["manifest"]["contents"]] == ["model.safetensors"]
    assert analysis["type"] == "analysis" and set(analysis["aliases"]) == {"latest", "patch4"}
    assert {"heads.csv", "layers.csv", "tracking.csv", "locality.png"} <= {
        e["path"] for e in analysis["manifest"]["contents"]
    }
    assert not [a for a in artifacts.values() if a["type"] == "dataset"], "an offline run cannot declare inputs"


def test_the_dataset_is_what_its_source_loaded_whatever_the_source(tmp_path: Path, monkeypatch) -> None:
    """A source added as one file gets the same record as the shipped ones: its name, its own keys' values
    and the digest of its arrays; the digest, and so W&B's version, follows the images, not the batch size."""
    import json

    from omegaconf import OmegaConf

    from vitladder.data import sources

    monkeypatch.setattr(sources, "_loaded", {})
    add_stripes_source(tmp_path, monkeypatch)
    stripes = OmegaConf.create({"source": "stripes", "num_images": 40, "scratch_dir": "x", "batch_size": 5})
    record = describe(stripes)
    art = dataset_artifact(record)
    assert (art.name, art.type) == ("dataset-stripes", "dataset") and art.metadata == record
    assert record == {
        "source": "stripes",
        "config": {"num_images": 40, "scratch_dir": "x"},
        "sha256": sources.load(stripes).digest,
        "train_images": 30,
        "test_images": 10,
        "image_size": 16,
        "classes": ["even", "odd"],
    }
    (entry,) = art.manifest.entries.values()
    assert entry.path == "dataset.json" and not entry.ref  # a small file of its own, no reference to a path
    identity = {key: value for key, value in record.items() if key != "config"}
    assert json.loads(Path(entry.local_path).read_text()) == identity

    rebatched = dataset_artifact(describe(OmegaConf.merge(stripes, {"batch_size": 8})))
    more = describe(OmegaConf.merge(stripes, {"num_images": 50}))
    assert rebatched.digest == art.digest and more["sha256"] != record["sha256"]
    assert dataset_artifact(more).digest != art.digest
    synthetic = describe(OmegaConf.create({"source": "synthetic", "num_train": 60, "num_test": 20}))
    assert synthetic["config"] == {"num_train": 60, "num_test": 20} and synthetic["classes"][0] == "grating_0deg_2cyc"
    assert dataset_artifact(synthetic).name == "dataset-synthetic"


def test_inputs_are_declared_where_wandb_can(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    class FakeConfig(dict):
        def update(self, values, allow_val_change=False):
            super().update(values)

    class FakeRun:  # records what an online run is asked to do
        def __init__(self, offline: bool):
            self.offline, self.used, self.logged, self.config = offline, [], [], FakeConfig()

        def use_artifact(self, artifact):
            self.used.append(artifact)

        def log_artifact(self, artifact, aliases):
            self.logged.append((artifact.name, artifact.type, aliases))

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    cfg = OmegaConf.create(
        {"ladder": "full", "rung": "warmup", "seed": 2, "data": {"source": "synthetic", "num_train": 10, "num_test": 5}}
    )
    online = FakeRun(offline=False)
    model, no_analysis = tmp_path / "model.safetensors", tmp_path / "no-analysis"
    log_rung_artifacts(online, cfg, describe(cfg.data), model, no_analysis, {"test_acc": 0.5})
    assert [(a.name, a.type) for a in online.used] == [("dataset-synthetic", "dataset")]
    assert online.logged == [("model-full-warmup-seed2", "model", ["latest", "warmup"])]
    assert online.config["inputs"] == [
        {"name": "dataset-synthetic", "type": "dataset", "digest": online.used[0].digest}
    ]
    offline = FakeRun(offline=True)
    declare_inputs(offline, online.used)
    assert offline.used == []
    assert offline.config["inputs"] == online.config["inputs"], "offline, the config is the record"


def test_the_report_uses_model_safetensors_else_an_older_versions_model_pt(tmp_path: Path) -> None:
    old, new = RunPaths(tmp_path / "patch8"), RunPaths(tmp_path / "patch4")
    for paths, model in ((old, old.model_pt), (new, new.model)):
        paths.checkpoints.mkdir(parents=True)
        model.write_bytes(b"weights")
    artifacts = run_artifacts("smoke", [(p.root.name, 0, p.root) for p in (old, new)])
    assert [(a.name, list(a.manifest.entries)) for a in artifacts] == [
        ("model-smoke-patch8-seed0", ["model.pt"]),
        ("model-smoke-patch4-seed0", ["model.safetensors"]),
    ]
