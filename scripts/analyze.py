"""Analyse the attention of any model the training wrote: what the callback writes after fitting.

    python scripts/analyze.py outputs/full/warmup                      # a run folder
    python scripts/analyze.py outputs/full/warmup/checkpoints/last.ckpt --images 200
    python scripts/analyze.py model.safetensors --out /tmp/analysis data.root=/elsewhere/cifar10-jpeg.tar.xz

The test images are the run's own: its config.yaml rebuilds the same test split, and the
first N of them are analysed. ``key=value`` overrides change that config (e.g. where the data
now lives); a model file outside any run folder composes its rung's config with them instead.
It runs the probes of the run's ``analysis.probes`` (``analysis.probes=[...]`` chooses others). A run
folder's own analysis/ (the default --out) also updates the probes' numbers in its done.json, which the
ladder report reads, and reaches the rung's W&B run: it is continued by its stored id (wandb_run_id.txt)
with the new summary, tables and charts, and a new version of its analysis artifact, so the dashboard
never disagrees with analysis/ and report.md.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from pathlib import Path

from vitladder.cli import reports_user_errors


@reports_user_errors
def main(argv: list[str] | None = None) -> Path:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a run folder, model.safetensors or .pt, or a Lightning .ckpt")
    parser.add_argument("--images", type=int, help="the first N test images (default: analysis.num_images)")
    parser.add_argument("--out", type=Path, help="output folder (default: <run>/analysis)")
    parser.add_argument("--batch-size", type=int, help="images per forward pass")
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", default="cuda" if cuda else "cpu", help="cpu or cuda (default: cuda if present)")
    parser.add_argument(
        "--wandb-mode", help="auto, online, offline or disabled (default: the run's wandb.mode; WANDB_MODE wins)"
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. data.root=PATH")
    args = parser.parse_args(argv)

    from vitladder.analysis.callback import AttentionAnalysis
    from vitladder.analysis.checkpoint import load_model, load_run_config, test_split
    from vitladder.analysis.outputs import history_rows, read_csv
    from vitladder.atomic import write_json
    from vitladder.errors import UserError
    from vitladder.run_folder import TRACK, RunPaths, read_summary
    from vitladder.training.recipe import run_lock
    from vitladder.wandb.analysis import log_reanalysis

    model, meta = load_model(args.checkpoint)  # CheckpointError: one line naming the file
    paths = RunPaths(meta.run_dir) if meta.run_dir is not None else None
    out = args.out or (paths.analysis if paths else meta.path.parent / f"{meta.path.stem}-analysis")
    writes_run = paths is not None and out.resolve() == paths.analysis.resolve()
    # Into a run folder only while no other process trains or analyses it: one line naming its holder otherwise.
    with run_lock(paths.root) if writes_run else nullcontext():
        cfg = load_run_config(meta, args.overrides)
        images, labels, classes = test_split(cfg)
        if args.images is not None and args.images < 1:
            raise UserError(f"--images must be at least 1, got {args.images}")
        if args.batch_size is not None and args.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
        n = min(args.images or int(cfg.analysis.num_images), len(images))  # at most the test split
        started = time.perf_counter()
        rung = str(meta.rung or cfg.rung)
        analysis = AttentionAnalysis.from_config(
            cfg.analysis, out, rung, int(meta.vit_config.patch_size), int(cfg.seed)
        )
        if args.batch_size:
            analysis.batch_size = args.batch_size
        # The tracked history: from a Lightning checkpoint, else the run's metrics.csv (track/<name> columns).
        metrics_csv = [] if paths is None or not paths.metrics_csv.is_file() else read_csv(paths.metrics_csv)
        analysis.history = meta.history or history_rows(metrics_csv, TRACK)
        model = model.to(args.device)
        images, labels = images[:n].to(args.device), labels[:n].to(args.device)
        analysis.analyse(model, images, labels, meta.stats, meta.classes or classes)
        run_id = None
        if writes_run:
            if paths.done.is_file():  # the run's results follow its analysis: the report reads done.json
                write_json(paths.done, {**read_summary(paths.root), **analysis.scalars})
            run_id = log_reanalysis(cfg, paths.root, analysis, args.wandb_mode or str(cfg.wandb.mode))
    layer1 = analysis.scalars.get("layer1_distance_px")
    print(
        f"{rung}: analysed {n} test images ({', '.join(analysis.probes)}) in {time.perf_counter() - started:.1f} s"
        + (f"; layer-1 distance {layer1:.1f} px" if layer1 is not None else "")
        + f"; files in {out}"
        + (f"; W&B run {run_id}" if run_id else "")
    )
    return out


if __name__ == "__main__":
    main()
