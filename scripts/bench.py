"""Benchmark the project's training loop against a bare PyTorch loop, the data pipeline and each probe.

    python scripts/bench.py                          # both widths on the CPU (a few minutes), CUDA if present
    python scripts/bench.py --width full --device cuda --compile
    python scripts/bench.py --width tiny --rehearse-cuda     # a bf16 GPU's choices on the CPU (bf16, fused AdamW)
    python scripts/bench.py --width tiny --steps 30 --rounds 7 --threads 1 --out /tmp/bench.json

Prints a table of medians and writes every figure (per-round values too) to --out as JSON. The checkpoint is timed
in a temporary folder beside --out (removed after), on the disk the runs' outputs go to.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vitladder.cli import reports_user_errors
from vitladder.errors import UserError


@reports_user_errors
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--width",
        choices=("tiny", "full", "both"),
        default=None,
        help="model width: tiny (48), full (384) or both (default: both on the CPU, full on CUDA)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench.json"), help="JSON with every figure")
    parser.add_argument("--batch-size", type=int, default=None, help="images per step (default: per width and device)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps before the clock starts")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds; medians are reported")
    parser.add_argument(
        "--analysis-images",
        type=int,
        default=None,
        help="images the probes run on, reported per 1,000 (default: 1,000 on CUDA; 200 tiny, 50 full on the CPU)",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the model in both loops")
    parser.add_argument(
        "--rehearse-cuda",
        action="store_true",
        help="take a bf16 GPU's choices on any device (speed.rehearse_cuda: bf16-mixed, fused AdamW, TF32)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice); 1 steadies figures on a shared machine",
    )
    args = parser.parse_args(argv)

    import torch

    from vitladder.atomic import write_json
    from vitladder.devtools.benchmark import format_table, run_benchmark

    if args.threads:
        torch.set_num_threads(args.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is visible")
    width = args.width or ("both" if device == "cpu" else "full")
    widths = ["tiny", "full"] if width == "both" else [width]
    counts = ("batch_size", "steps", "warmup", "rounds", "analysis_images")
    overrides = {key: value for key in counts if (value := getattr(args, key)) is not None}
    overrides |= {key: True for key in ("compile", "rehearse_cuda") if getattr(args, key)}
    for name in ("lightning.pytorch", "lightning.fabric"):  # one fit per round: keep the banner out of the table
        logging.getLogger(name).setLevel(logging.WARNING)

    report = run_benchmark(widths, device, overrides, folder=args.out.parent)  # checkpoints: on the output's disk
    write_json(args.out, report)
    print()
    print(format_table(report))
    print(f"\nall figures: {args.out}")
    return report


if __name__ == "__main__":
    main()
