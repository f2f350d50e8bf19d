"""Every analysis entry point measures the model in eval mode and is deterministic.

The model has stochastic depth (drop_path_rate > 0) and the caller leaves it in TRAIN mode, as
Lightning does while the callback tracks locality: in train mode drop path would skip blocks at
random, so two analyses of one model would differ. Each entry point must give the numbers of the
model in eval mode, twice the same, and leave the model's mode as it found it. The callback and
analyze.py must also analyse exactly the images they promise (the first N of a split).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from entry_points import load_script
from omegaconf import OmegaConf
from torch import nn

from vitladder.analysis.callback import AttentionAnalysis
from vitladder.analysis.checkpoint import test_split as run_test_split  # not collected as a test
from vitladder.analysis.outputs import read_csv
from vitladder.analysis.summary import AttentionSummary, analyse, example_attention
from vitladder.config import compose_rung
from vitladder.data.datamodule import Split
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.demo.export import attention_payload
from vitladder.model import ViTConfig, build_vit

REPO = Path(__file__).resolve().parents[2]
CONFIG = ViTConfig(patch_size=8, embed_dim=24, depth=3, drop_path_rate=0.5)
PATCH = CONFIG.patch_size


def stochastic_vit() -> nn.Module:
    """A small ViT with heavy drop path, in train mode (the caller's), with peaked attention."""
    torch.manual_seed(0)
    model = build_vit(CONFIG)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[: 2 * CONFIG.embed_dim] *= 4  # q and k: attention far from uniform
    return model.train()


def some_images(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def as_tensors(summary: AttentionSummary) -> dict[str, object]:
    heads = [summary.heads[name] for name in ("distance_px", "entropy_nats", "cls_share", "distance_drop_px")]
    return {"heads": torch.stack(heads), "uniform": summary.uniform}


def assert_same(a: AttentionSummary, b: AttentionSummary) -> None:
    ta, tb = as_tensors(a), as_tensors(b)
    assert ta["uniform"] == tb["uniform"]
    assert torch.equal(ta["heads"], tb["heads"]), "the per-head numbers differ"


def eval_reference(images: torch.Tensor, **kwargs) -> AttentionSummary:
    """The analysis of the same model, put in eval mode by the test itself."""
    return analyse(stochastic_vit().eval(), images, patch_px=PATCH, stats=CIFAR10_STATS, **kwargs)


def test_train_mode_would_change_the_numbers() -> None:
    # The premise of this file: in train mode, drop path changes what the blocks compute.
    model, images = stochastic_vit(), some_images(4, 0)
    from vitladder.data.augment import normalize

    with torch.no_grad():
        assert not torch.equal(
            model(normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std)),
            model(normalize(images, CIFAR10_STATS.mean, CIFAR10_STATS.std)),
        )


def test_analyse_runs_in_eval_mode_and_is_deterministic() -> None:
    images = some_images(6, 1)
    model = stochastic_vit()
    first = analyse(model, images, batch_size=4, patch_px=PATCH, stats=CIFAR10_STATS)
    second = analyse(model, images, batch_size=4, patch_px=PATCH, stats=CIFAR10_STATS)
    assert model.training, "the caller's train mode must be restored"
    assert_same(first, second)
    assert_same(first, eval_reference(images, batch_size=4))


class LightningLike(nn.Module):
    """What the callback reads of the LightningModule: ``.model`` and ``.log``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.logged: dict[str, float] = {}

    def log(self, name: str, value: float, **kwargs) -> None:
        self.logged[name] = value


def stub_trainer(epoch: int = 0) -> SimpleNamespace:
    """A trainer as far as the callback reads it, with a validation and a test split of distinct images."""
    val = Split(some_images(12, 2), torch.arange(12) % 10)
    test = Split(some_images(10, 3), torch.arange(10) % 10)
    datamodule = SimpleNamespace(val=val, test=test, classes=tuple(f"c{k}" for k in range(10)), stats=CIFAR10_STATS)
    return SimpleNamespace(datamodule=datamodule, current_epoch=epoch, is_global_zero=True, loggers=[])


def make_callback(out_dir: Path, data: SimpleNamespace) -> AttentionAnalysis:
    return AttentionAnalysis(
        out_dir,
        data=data,
        rung="stochastic_depth",
        patch_px=PATCH,
        num_images=7,
        batch_size=4,
        example_image=3,
        track_every_n_epochs=1,
        track_images=5,
    )


def test_the_callbacks_tracking_runs_in_eval_mode_on_the_first_validation_images(tmp_path: Path) -> None:
    trainer = stub_trainer(epoch=2)
    reference = eval_reference(trainer.datamodule.val.images[:5], batch_size=4).layers
    histories = []
    for attempt in range(2):
        module = LightningLike(stochastic_vit())
        callback = make_callback(tmp_path / f"a{attempt}", trainer.datamodule)
        callback.on_train_epoch_end(trainer, module)
        assert module.model.training and module.training  # Lightning's train mode is left as it was
        (row,) = [r for r in callback.history if r["epoch"] == 3]
        assert [row[f"layer{layer}/distance_px"] for layer in range(3)] == reference["distance_px"].tolist()
        assert [row[f"layer{layer}/entropy_nats"] for layer in range(3)] == reference["entropy_nats"].tolist()
        assert module.logged["track/layer2/distance_px"] == row["layer2/distance_px"]
        histories.append(callback.history)
    assert histories[0] == histories[1]


def test_the_callbacks_final_analysis_runs_in_eval_mode_on_the_first_test_images(tmp_path: Path) -> None:
    trainer = stub_trainer()
    test = trainer.datamodule.test
    reference = eval_reference(test.images[:7], batch_size=4)
    example = example_attention(stochastic_vit().eval(), test.images[:7], test.labels[:7], 3, CIFAR10_STATS)
    module = LightningLike(stochastic_vit())
    callback = make_callback(tmp_path, trainer.datamodule)
    callback.on_train_end(trainer, module)  # writes figures: once, and compared with the eval-mode numbers
    assert module.model.training
    assert callback.scalars["analysis_images"] == 7 and (tmp_path / "heads.csv").is_file()
    heads = callback.results["attention"].tables["heads"]  # (L * H) rows, layer-major, unrounded
    for name in ("distance_px", "entropy_nats", "cls_share", "distance_drop_px"):
        assert torch.equal(torch.tensor([r[name] for r in heads]), reference.heads[name].flatten()), name
    title = callback.results["cls_attention"].figures["cls_attention"].get_suptitle()
    assert f"test image 3 (true c{example.label}, predicted c{example.predicted})" in title


def test_the_demo_export_runs_in_eval_mode_and_is_deterministic() -> None:
    images, labels = some_images(3, 4), torch.tensor([1, 2, 3])
    model = stochastic_vit()
    first, second = (
        attention_payload(model, images, labels, stats=CIFAR10_STATS),
        attention_payload(model, images, labels, stats=CIFAR10_STATS),
    )
    assert model.training
    assert first == second
    assert first == attention_payload(stochastic_vit().eval(), images, labels, stats=CIFAR10_STATS)


def test_analyze_script_runs_in_eval_mode_on_the_first_test_images(tmp_path: Path, monkeypatch) -> None:
    cfg = compose_rung(
        "stochastic_depth",
        [
            "profile=smoke",
            "data=synthetic",
            "data.num_train=40",
            "data.num_test=30",
            "data.val_size=8",
            "data.train_subset=null",
            "data.test_subset=null",
            f"output_root={tmp_path}",
            f"model.patch_size={PATCH}",
            f"model.embed_dim={CONFIG.embed_dim}",
            f"model.depth={CONFIG.depth}",
            f"model.drop_path_rate={CONFIG.drop_path_rate}",
            "analysis.example_image=1",
        ],
    )
    run = Path(cfg.run_dir)
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    torch.save(
        {
            "format": "vitladder-model/1",
            "vit_config": CONFIG.to_dict(),
            "state_dict": stochastic_vit().state_dict(),
            "classes": [f"c{k}" for k in range(10)],
            "rung": cfg.rung,
            "ladder": cfg.ladder,
        },
        run / "checkpoints" / "model.pt",
    )

    # The script must not rely on the loader's eval(): hand it the model in train mode.
    import vitladder.analysis.checkpoint as checkpoint

    load_model = checkpoint.load_model
    monkeypatch.setattr(checkpoint, "load_model", lambda path: (lambda m, meta: (m.train(), meta))(*load_model(path)))
    out = load_script("analyze").main(
        [str(run), "--images", "6", "--batch-size", "4", "--device", "cpu", "--out", str(tmp_path / "a")]
    )
    assert checkpoint.load_model is not load_model  # the script really read the model through the patch

    images, labels, _ = run_test_split(cfg)
    reference = eval_reference(images[:6], batch_size=4)
    values = torch.tensor(
        [
            [float(r["distance_px"]), float(r["entropy_nats"]), float(r["cls_share"])]
            for r in read_csv(out / "heads.csv")
        ]
    )  # (L * H, 3), layer-major
    expected = torch.stack(
        [reference.heads["distance_px"], reference.heads["entropy_nats"], reference.heads["cls_share"]], dim=-1
    ).reshape(-1, 3)
    assert torch.allclose(values, expected, atol=2e-6)  # the CSV rounds to 6 decimals
