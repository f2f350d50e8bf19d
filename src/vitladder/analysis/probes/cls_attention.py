"""Where the CLS token looks in one image: every head's map, their mean and the attention rollout through each
layer (Abnar & Zuidema 2020; docs/design.md §4), beside the image: ``cls_attention.png``."""

from __future__ import annotations

from torch import Tensor, nn

from vitladder.analysis.figures import plot_cls_attention
from vitladder.analysis.probes import Context, Result
from vitladder.analysis.summary import example_attention
from vitladder.text import printable

CLASS_NAME_CHARS = 40  # a longer class name is cut short in the title


def run(model: nn.Module, images: Tensor, labels: Tensor, ctx: Context) -> Result:
    example = example_attention(model, images, labels, min(ctx.example_index, len(images) - 1), ctx.stats)
    classes = ctx.classes

    def name(index: int | None) -> str:  # a class-folder name: one short line of text in the title
        if index is None:
            return "?"
        return printable(classes[index], limit=CLASS_NAME_CHARS) if classes and index < len(classes) else str(index)

    title = (
        f"{ctx.rung}: CLS attention, test image {example.index} (true {name(example.label)}, "
        f"predicted {name(example.predicted)})"
    )
    return Result(figures={"cls_attention": plot_cls_attention(example, ctx.grid, title)})
