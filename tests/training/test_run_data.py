"""A run takes what its data are from the source: loaded once per process (also across a ladder's estimate and
its rungs), the image size and classes of the images, the statistics of the training split, carried in the model."""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from PIL import Image
from run_helpers import saved_file

from vitladder.config import compose_rung, scaled_epochs
from vitladder.data import sources
from vitladder.data.sources import synthetic
from vitladder.data.stats import ChannelStats, channel_stats
from vitladder.devtools import estimate
from vitladder.devtools.estimate import estimate_ladder
from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths


@pytest.fixture
def load_calls(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every call of the synthetic source's load, in a process that has loaded nothing yet."""
    monkeypatch.setattr(sources, "_loaded", {})
    calls: list = []
    real = synthetic.load
    monkeypatch.setattr(synthetic, "load", lambda data_cfg: calls.append(data_cfg) or real(data_cfg))
    return calls


def test_a_rung_loads_its_data_once(tiny_cfg, load_calls: list) -> None:
    train_rung(tiny_cfg("patch8", "model.depth=1", "profile.epoch_scale=0.01", "analysis.enabled=false"))
    assert len(load_calls) == 1  # not again in Lightning's prepare_data and setup, nor for the test


def test_the_ladders_estimate_and_its_rungs_share_one_load(tiny_cfg, load_calls: list) -> None:
    no_probes = ["model.depth=1", "analysis.enabled=false"]  # the probes' timing loads no data
    cfgs = [tiny_cfg("patch8", *no_probes), tiny_cfg("patch4", *no_probes, "data.batch_size=32")]
    estimate_ladder(cfgs)
    assert len(load_calls) == 1
    train_rung(tiny_cfg("patch8", "model.depth=1", "profile.epoch_scale=0.01", "analysis.enabled=false"))
    assert len(load_calls) == 1


def make_folder(root: Path, size: int, n_train: int = 24, n_test: int = 6) -> Path:
    """root/{train,test}/{dark,light}/<i>.png: size x size images, random pixels, dark or light on average."""
    generator = torch.Generator().manual_seed(0)
    for split, n in (("train", n_train), ("test", n_test)):
        for label, name in enumerate(("dark", "light")):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = torch.randint(0, 128, (size, size, 3), generator=generator) + 100 * label
                buffer = io.BytesIO()
                Image.fromarray(pixels.to(torch.uint8).numpy()).save(buffer, format="PNG")
                (root / split / name / f"{i}.png").write_bytes(buffer.getvalue())
    return root


def folder_cfg(root: Path, tmp_path: Path, rung: str, *overrides: str):
    """tiny_cfg's run (smoke width, under tmp_path) on the image folder ``root``."""
    return compose_rung(rung, [*FOLDER_RUN, *folder_overrides(root, tmp_path), f"output_root={tmp_path}", *overrides])


FOLDER_RUN = ["profile=smoke", "trainer.enable_progress_bar=false", "model.depth=1", "analysis.num_images=4"]


def folder_overrides(root: Path, tmp_path: Path) -> list[str]:
    return [
        "data=imagefolder",
        f"data.root={root}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.val_size=8",
        "data.batch_size=8",
        "data.train_subset=null",
        "data.test_subset=null",
    ]


def test_the_estimate_times_a_model_for_the_datas_image_size_and_classes(tmp_path, monkeypatch) -> None:
    timed = []
    cost = estimate.StepCost(per_image_s=1e-3, checkpoint_s=0.5)
    monkeypatch.setattr(estimate, "step_cost", lambda vit, batch, device, folder, *choices: timed.append(vit) or cost)
    free = defaultdict(lambda: estimate.ProbeCost(0.0, 0.0))
    monkeypatch.setattr(estimate, "probe_costs", lambda vit, device, analysis: timed.append(vit) or free)
    root = make_folder(tmp_path / "folder", size=48)
    cfg = folder_cfg(root, tmp_path, "patch8")
    (seconds,) = estimate_ladder([cfg])
    assert [(vit.img_size, vit.num_classes, vit.patch_size) for vit in timed] == [(48, 2, 8)] * 2  # step, probes
    epochs, _ = scaled_epochs(cfg)  # of 40 training images (8 held out to validate) and 12 test images
    checkpoints = 0.5 * epochs  # the smoke profile saves every epoch
    assert seconds == pytest.approx(estimate.RUN_OVERHEAD_S + 1e-3 * (epochs * (40 + 8 / 3) + 12 / 3) + checkpoints)


def test_a_48px_image_folder_trains_a_48px_model_normalised_with_its_training_split(tmp_path) -> None:
    root = make_folder(tmp_path / "imgs", size=48)
    cfg = folder_cfg(root, tmp_path, "patch8", "profile.epoch_scale=0.01")
    train_rung(cfg)
    saved = saved_file(Path(cfg.run_dir))
    assert saved["vit_config"]["img_size"] == 48 and saved["vit_config"]["num_classes"] == 2
    assert saved["classes"] == ["dark", "light"]

    from run_helpers import run_splits

    train, val, _ = run_splits(Path(cfg.run_dir))
    stats = channel_stats(train.images)  # the images that trained, not the validation hold-out
    assert saved["normalization"] == {"mean": list(stats.mean), "std": list(stats.std)}
    assert saved["normalization"]["mean"] != list(channel_stats(torch.cat([train.images, val.images])).mean)


def test_a_patch_size_that_does_not_divide_the_images_is_one_line_before_anything_is_written(tmp_path) -> None:
    root = make_folder(tmp_path / "imgs", size=36, n_train=8, n_test=2)
    cfg = folder_cfg(root, tmp_path, "patch8")
    with pytest.raises(UserError) as info:
        train_rung(cfg)
    message = str(info.value)
    assert message == (
        "model.patch_size=8 does not divide the 36x36 images of this data: "
        "choose a divisor of 36, e.g. model.patch_size=4"
    )
    assert not Path(cfg.run_dir).exists()


def test_val_size_0_trains_on_every_training_image_and_tracks_a_fixed_sample_of_them(tiny_cfg) -> None:
    from run_helpers import run_splits, saved_model

    from vitladder.analysis.outputs import read_csv
    from vitladder.analysis.summary import analyse

    cfg = tiny_cfg("patch4", "model.depth=2", "profile.epoch_scale=0.02", "data.val_size=0")  # 2 epochs
    summary = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    assert summary["val_acc"] is None and summary["steps"] == 2 * (1200 // 64)  # all 1,200 images, no validation
    assert not any(row.get("val/acc") or row.get("val/loss") for row in read_csv(paths.metrics_csv))
    # Tracking measured the first training images of the seeded split, as they are (no augmentation).
    train, val, _ = run_splits(paths.root)
    assert len(val.labels) == 0 and len(train.labels) == 1200
    stats = ChannelStats.from_dict(saved_file(paths.root)["normalization"])
    measured = analyse(saved_model(paths.root), train.images[:32], 32, 4, stats=stats)
    tracked = [float(r["distance_px"]) for r in read_csv(paths.analysis / "tracking.csv") if r["epoch"] == "2"]
    assert tracked == pytest.approx(measured.layers["distance_px"].tolist(), abs=1e-4)
