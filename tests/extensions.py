"""What a newcomer adds at each documented extension point, written once for the tests that add them: a data
source (one module under data/sources/), a per-head metric (one entry of analysis/metrics.py's METRICS), a
probe (one module under analysis/probes/) and a rung (one file under conf/step/); and a copy of the project to
add them to."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

STRIPES_SOURCE = '''
"""data=stripes: a source added as one file, with keys of its own."""

from dataclasses import dataclass

import torch

from vitladder.config_schema import DataConfig, setting
from vitladder.data.sources import ImageSplits


@dataclass
class Config(DataConfig):
    num_images: int = setting(40, valid=(lambda n: n >= 20, "at least 20", "40"))
    scratch_dir: str = setting("scratch", in_recipe=False)  # changes no result


def load(data_cfg):
    n = int(data_cfg.num_images)
    labels = torch.arange(n) % 2  # (n,)
    images = (labels[:, None, None, None] * torch.arange(16)).expand(n, 3, 16, 16).to(torch.uint8) * 8
    return ImageSplits(images[:-10], labels[:-10], images[-10:], labels[-10:], ("even", "odd"))
'''

GRAD_CLIP_RUNG = """\
# @package _global_
defaults:
  - epochs200
  - _self_

rung: grad_clip
rung_info:
  grad_clip:
    description: gradient clipping at norm 1
trainer:
  gradient_clip_val: 1.0
"""

# The attention a patch query gives its own patch, per head: (B, H, T, T) -> (H,).
SELF_SHARE_METRIC = """\
    HeadMetric(
        "self_share",
        lambda attn, px: attn[:, :, 1:, 1:].diagonal(dim1=-2, dim2=-1).float().mean(dim=(0, 2)),
        "self share",
        "",
        "self",
        digits=3,
        uniform=lambda grid, px: 1 / (1 + grid * grid),
    ),
"""


CONFIDENCE_PROBE = '''
"""analysis.probes=[..., confidence]: how sure the model is of its answer, and after each layer (the head reading
the CLS token there), a probe added as one file."""

import torch
from matplotlib.figure import Figure

from vitladder.analysis.probes import ByLayer, Column, Result
from vitladder.analysis.summary import model_inputs


def confidence(model, images, ctx):
    """The largest softmax probability per image, the head reading the CLS token after each layer, (L, N): the
    last row is the model's own."""
    inputs = model_inputs(model, images, ctx.stats)
    tokens = model.forward_intermediates(
        inputs, norm=True, output_fmt="NLC", return_prefix_tokens=True, intermediates_only=True
    )  # [(patches (N, P, D), CLS (N, 1, D))] * L
    logits = torch.stack([model.forward_head(torch.cat([cls, patches], dim=1)) for patches, cls in tokens])
    return logits.softmax(dim=-1).max(dim=-1).values  # (L, N, classes) -> (L, N)


def run(model, images, labels, ctx):
    per_layer = confidence(model, images, ctx).float().cpu()  # (L, N)
    per_image = per_layer[-1]
    figure = Figure()
    figure.add_subplot().hist(per_image.numpy(), bins=10, range=(0, 1))
    tables = {
        "confidence": [{"image": i, "confidence": float(c)} for i, c in enumerate(per_image)],
        "confidence_by_layer": [{"layer": i, "read_out": float(c)} for i, c in enumerate(per_layer.mean(dim=1))],
    }
    scalars = {"mean_confidence": float(per_image.mean())}
    return Result(tables=tables, figures={"confidence_hist": figure}, scalars=scalars)


def track(model, images, ctx):
    return {"confidence": float(confidence(model, images, ctx)[-1].mean())}


def columns():
    return (Column("mean_confidence", "mean confidence", digits=3, track="confidence", by_rung="confidence"),)


def by_layer():
    return (ByLayer("read_out", "read-out confidence", "confidence", table="confidence_by_layer"),)
'''
PROBES_WITH_CONFIDENCE = "analysis.probes=[attention,cls_attention,confidence]"


def add_confidence_probe(copy: Path) -> None:
    (copy / "src" / "vitladder" / "analysis" / "probes" / "confidence.py").write_text(CONFIDENCE_PROBE)


def add_confidence_probe_here(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """analysis.probes=[..., confidence] in this process: its module in ``folder``, one more place the probes
    package looks in (a module imported by an earlier test forgotten)."""
    from vitladder.analysis import probes

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "confidence.py").write_text(CONFIDENCE_PROBE)
    monkeypatch.setattr(probes, "__path__", [*probes.__path__, str(folder)])
    monkeypatch.delitem(sys.modules, f"{probes.__name__}.confidence", raising=False)


def add_stripes_source(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data=stripes in this process: its module in ``folder``, one more place the sources package looks in."""
    from vitladder.data import sources

    (folder / "stripes.py").write_text(STRIPES_SOURCE)
    monkeypatch.setattr(sources, "__path__", [*sources.__path__, str(folder)])


def copy_project(repo_root: Path, copy: Path) -> Path:
    """The project as a newcomer's checkout has it: sources, configs, entry points, Makefile and pyproject.toml."""
    for name in ("src", "conf", "scripts"):
        shutil.copytree(repo_root / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("train.py", "Makefile", "pyproject.toml"):
        shutil.copy2(repo_root / name, copy / name)
    return copy


def add_grad_clip_rung(copy: Path) -> None:
    (copy / "conf" / "step" / "grad_clip.yaml").write_text(GRAD_CLIP_RUNG)


def add_self_share_metric(copy: Path) -> None:
    """One more entry at the end of METRICS, the last statement of analysis/metrics.py."""
    path = copy / "src" / "vitladder" / "analysis" / "metrics.py"
    text = path.read_text().rstrip()
    assert text.endswith("\n)"), "METRICS is no longer the end of metrics.py"
    path.write_text(f"{text[:-1]}{SELF_SHARE_METRIC})\n")


def add_stripes_module(copy: Path) -> None:
    (copy / "src" / "vitladder" / "data" / "sources" / "stripes.py").write_text(STRIPES_SOURCE)
