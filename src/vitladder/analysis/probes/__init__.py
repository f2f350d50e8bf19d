"""What is asked of a trained model: one module per probe, found by name from ``analysis.probes`` (modules whose name
starts with ``_`` are helpers). A probe defines ``run(model, images, labels, ctx) -> Result`` (eval mode, no gradients,
``(N, 3, S, S)`` uint8 images and ``(N,)`` labels on the training device) and optionally ``track(model, images, ctx)
-> {name: float}`` (measured during training, handed back in ``ctx.history``), ``columns()`` and ``by_layer()`` (how
the ladder report shows it). README "Adding an analysis" says the rest.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

from vitladder.errors import UserError

if TYPE_CHECKING:  # discovery (probe_names, the config's check) imports neither torch nor matplotlib
    from matplotlib.figure import Figure
    from torch import Tensor, nn

    from vitladder.data.stats import ChannelStats


@dataclass(frozen=True)
class Context:
    """What a probe knows besides the model and the images."""

    rung: str
    seed: int
    patch_px: int
    grid: int  # patches per side
    stats: ChannelStats  # the normalisation the model trained with
    classes: tuple[str, ...] | None = None
    batch_size: int = 250
    example_index: int = 0  # the image a per-image figure shows
    history: tuple[Mapping[str, float], ...] = ()  # tracked values: {"epoch": epochs trained, name: value}
    settings: Mapping[str, Mapping] = field(default_factory=dict)  # probe name -> its analysis.settings block


@dataclass(frozen=True)
class Chart:
    """A W&B custom chart over one of the result's tables (``wandb.plot.line`` or ``.scatter``)."""

    table: str
    x: str
    y: str
    title: str
    kind: str = "line"


@dataclass
class Result:
    """What a probe makes, by name; W&B keys ``analysis/<name>``."""

    tables: dict[str, list[dict]] = field(default_factory=dict)  # <name>.csv, a W&B table
    figures: dict[str, Figure] = field(default_factory=dict)  # <name>.png, the W&B image analysis/figures/<name>
    scalars: dict[str, float] = field(default_factory=dict)  # done.json, the W&B summary, the ladder report
    charts: dict[str, Chart] = field(default_factory=dict)  # W&B custom charts over the tables


@dataclass(frozen=True)
class Column:
    """A scalar as the ladder report shows it: ladder.csv's column ``key`` (the mean over seeds) and, with a
    ``header``, a report.md column."""

    key: str
    header: str | None = None
    digits: int = 1
    ci: bool = True  # with <key>_ci95 in ladder.csv, ± 95% CI in report.md
    reference: Callable[[Mapping], str] | None = None  # (the rung's reference figures) -> a "ref." cell beside it
    text: Callable[[Callable[[str], list[float]]], str] | None = None  # (values(key): one per seed) -> the cell
    track: str | None = None  # its value tracked during training (track/<track>): a line per rung against epoch
    by_rung: str | None = None  # a chart by rung in the W&B report run, report/<by_rung>_by_rung
    uniform: str | None = None  # the column of its value under uniform attention, drawn as the baseline


@dataclass(frozen=True)
class ByLayer:
    """A per-layer value as the ladder report draws it: column ``name`` of the run's ``<table>.csv``, the mean over
    seeds: a column of the W&B report run's ``layers`` table and, with ``figure``, a line per rung in
    ``<short>_by_layer.png`` (the column ``uniform`` dashed) and the chart ``report/<name>_by_layer``."""

    name: str
    label: str  # what it measures, for titles: "mean attention distance"
    short: str  # one word for the file name
    unit: str = ""
    table: str = "layers"
    uniform: str | None = None
    figure: bool = True

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


def probe_names() -> list[str]:
    """Every probe there is: the public modules of this package, sorted."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def probe_named(name: str) -> ModuleType:
    """The module of probe ``name``; an unknown name is one line listing the known ones."""
    if name not in probe_names():
        raise UserError(f"unknown probe '{name}' in analysis.probes: choose from {', '.join(probe_names())}")
    return importlib.import_module(f"{__name__}.{name}")


def columns(names: Sequence[str]) -> tuple[Column, ...]:
    """The ladder report's columns of the probes ``names``, in their order."""
    return tuple(column for name in names for column in getattr(probe_named(name), "columns", tuple)())


def by_layer(names: Sequence[str]) -> tuple[ByLayer, ...]:
    """The per-layer values the ladder report draws of the probes ``names``, in their order."""
    return tuple(value for name in names for value in getattr(probe_named(name), "by_layer", tuple)())


def run_probes(
    model: nn.Module, images: Tensor, labels: Tensor, ctx: Context, names: Sequence[str]
) -> dict[str, Result]:
    """Every probe of ``names`` on ``images`` ``(N, 3, S, S)`` uint8 and ``labels`` ``(N,)``: {name: Result}; each
    file, table and scalar has one maker."""
    from vitladder.analysis.capture import evaluating

    results: dict[str, Result] = {}
    seen: dict[str, str] = {}
    for name in names:
        with evaluating(model):
            result = probe_named(name).run(model, images, labels, ctx)
        for kind in ("tables", "figures", "scalars", "charts"):
            for key in getattr(result, kind):
                if seen.setdefault(f"{kind}:{key}", name) != name:
                    raise ValueError(f"probes {seen[f'{kind}:{key}']} and {name} both make {kind} '{key}'")
        results[name] = result
    return results


def track_probes(model: nn.Module, images: Tensor, ctx: Context, names: Sequence[str]) -> dict[str, float]:
    """The values every probe of ``names`` that tracks measures on ``images``: {name: value}."""
    from vitladder.analysis.capture import evaluating

    values: dict[str, float] = {}
    for name in names:
        probe = probe_named(name)
        if hasattr(probe, "track"):
            with evaluating(model):
                values.update(probe.track(model, images, ctx))
    return values
