"""Export the browser demo of a trained model: a static folder to open from disk or serve.

    python scripts/export_demo.py outputs/full/epochs200              # -> outputs/full/epochs200/demo/
    python scripts/export_demo.py outputs/full/warmup/checkpoints/last.ckpt --images 32 --out /tmp/demo
    python scripts/export_demo.py model.safetensors data.root=/elsewhere/cifar10-jpeg.tar.xz

The images are the first N of the run's own test split; ``key=value`` overrides change
the run's config (e.g. where its data now lives).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vitladder.cli import reports_user_errors


@reports_user_errors
def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a run folder, model.safetensors or .pt, or a Lightning .ckpt")
    parser.add_argument("--images", type=int, default=16, help="how many test images the page offers (default 16)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: <run>/demo)")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. data.root=PATH")
    args = parser.parse_args(argv)

    from vitladder.demo.export import export_demo

    index = export_demo(args.checkpoint, args.out, args.images, args.overrides)
    print(f"demo written: open {index.resolve().as_uri()}")
    return index


if __name__ == "__main__":
    main()
