"""Names from the data (class folders) are plain text in figures, in the demo and through a whole run:
`price_$` is not maths, `<b>x</b>` is not markup, a newline or 300 characters stay one short line."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from data_js import read_data_js
from matplotlib.figure import Figure
from matplotlib.text import Text
from PIL import Image
from run_helpers import saved_file

from vitladder.analysis import figures
from vitladder.analysis.probes import Context, cls_attention, run_probes
from vitladder.analysis.probes.cls_attention import CLASS_NAME_CHARS
from vitladder.config import compose_rung
from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
from vitladder.demo.export import export_demo
from vitladder.model import ViTConfig, build_vit
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths

HOSTILE = ("price_$", "a$b$c", "<b>x</b>", "new\nline", r"\frac{1}{0}^_", "</script><!--", "x" * 300)


def example_figure(classes, tmp_path: Path | None = None) -> Figure:
    """The cls_attention probe's figure of test image 2 of six, for a model of ``classes`` (saved into ``tmp_path``)."""
    torch.manual_seed(0)
    model = build_vit(ViTConfig(patch_size=4, embed_dim=24))
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    ctx = Context("patch4", 0, 4, 8, CIFAR10_STATS, tuple(classes), example_index=2)
    figure = run_probes(model, images, torch.arange(6), ctx, ["cls_attention"])["cls_attention"].figures[
        "cls_attention"
    ]
    if tmp_path is not None:
        figures.save_figure(figure, tmp_path / "cls_attention.png")
    return figure


def assert_plain(figs: list[Figure]) -> None:
    # Empty ones left out: inspecting a figure creates tick labels lazily, outside the plot function.
    texts = [t for fig in figs for t in fig.findobj(Text) if t.get_text()]
    assert texts and not [t.get_text() for t in texts if t.get_parse_math() or t.get_usetex()]
    assert matplotlib.rcParams["text.parse_math"]  # only the project's figures were changed


def test_class_names_in_the_example_title_are_plain_one_line_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The case: a class folder `price_$` as the true and the predicted class of the example
    # gives the title two dollars, which matplotlib would parse as maths and raise on.
    figure = example_figure(["price_$"] * 10, tmp_path)
    assert (tmp_path / "cls_attention.png").is_file()
    assert figure.get_suptitle() == "patch4: CLS attention, test image 2 (true price_$, predicted price_$)"
    assert_plain([figure])

    real = cls_attention.example_attention
    monkeypatch.setattr(cls_attention, "example_attention", lambda *a: replace(real(*a), label=0, predicted=1))
    assert (
        example_figure(["new\nline", "x" * 300]).get_suptitle()
        == f"patch4: CLS attention, test image 2 (true new\\nline, predicted {'x' * (CLASS_NAME_CHARS - 1)}…)"
    )


def test_every_figure_shows_titles_and_labels_as_written(tmp_path: Path) -> None:
    text = " ".join(HOSTILE[:-1])
    history = [
        {"epoch": e, "layer": layer, "distance_px": 10.0 + layer, "entropy_nats": 3.0}
        for e in range(2)
        for layer in range(2)
    ]
    figs = [
        figures.plot_heads(np.full((7, 6), 0.5), 0.5, text, text),
        figures.plot_layer_lines({text: [1.0, 2.0]}, {text + " ref": 1.5}, text, text),
        figures.plot_tracking(history, {"distance_px": 16.0, "entropy_nats": 4.0}, text),
    ]
    for fig, name in zip(figs, ("heads.png", "lines.png", "tracking.png")):
        figures.save_figure(fig, tmp_path / name)
    assert figs[0].axes[0].get_title() == text and figs[0].axes[0].get_ylabel() == text
    assert [t.get_text() for t in figs[1].axes[0].get_legend().get_texts()] == [text, text + " ref"]
    assert figs[2].get_suptitle() == text
    for name in ("heads.png", "lines.png", "tracking.png"):
        with Image.open(tmp_path / name) as image:
            assert image.format == "PNG"
    assert_plain(figs)


def png_noise(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_run_on_class_folders_named_like_maths_and_markup_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One `$` per name: whichever class is true and predicted, the example's title holds two.
    names = ("<b>x<i>_$", "price_$")  # folder names: no "/"
    root = tmp_path / "imgs"
    for split, n in (("train", 12), ("test", 6)):
        for k, name in enumerate(names):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                (root / split / name / f"{i}.png").write_bytes(png_noise(100 * k + 10 * (split == "test") + i))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = compose_rung(
        "patch8",
        [
            "profile=smoke",
            "data=imagefolder",
            f"data.root={root}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "data.val_size=4",
            "data.train_subset=null",
            "data.test_subset=null",
            "data.batch_size=10",
            f"output_root={tmp_path / 'out'}",
            "trainer.enable_progress_bar=false",
            "analysis.num_images=8",
            "analysis.batch_size=8",
            "analysis.track_every_n_epochs=0",
        ],
    )
    summary = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    assert paths.model.is_file() and paths.done.is_file() and summary["epochs"] == 1
    assert (paths.root / "analysis" / "cls_attention.png").is_file()
    assert saved_file(paths.root)["classes"] == list(names)

    index = export_demo(paths.root, num_images=4)
    data_js = (index.parent / "data.js").read_text()
    assert "<" not in data_js and ">" not in data_js  # no `</script>` or `<!--`, wherever data.js is inlined
    assert read_data_js(index.parent / "data.js")["classes"] == list(names)
