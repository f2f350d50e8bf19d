"""One prepared check on one GPU: benchmark, the epochs200 recipe on real CIFAR-10 within a budget, the analysis.

    make gpu-wheels                                  # here, with a network: wheels + the data archive into gpu/
    make gpu-check                                   # there: installs gpu/wheels offline, then runs this script
    python scripts/gpu_check.py [--budget 480] [--out DIR] [--data PATH] [--settings eager,compiled] [overrides]
    python scripts/gpu_check.py --smoke              # the same path on the CPU at the smoke width (< 3 minutes)

Writes gpu_check.json (every figure), gpu_check.md (a summary) and distance_by_layer.png into --out, beside the
run's folder (epochs200/) and its ladder report. Trailing key=value overrides apply to every config of the check.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ARCHIVE = REPO / "gpu" / "data" / "cifar10-jpeg.tar.xz"  # where `make gpu-wheels` copies it
# Imported by the check, module -> distribution; those the GPU machine lacks travel as wheels (gpu/requirements.txt).
NEEDED = {name: name for name in ("torch", "lightning", "timm", "torchmetrics", "matplotlib")}
NEEDED |= {"hydra": "hydra-core", "omegaconf": "omegaconf"}


def guard_wandb() -> None:
    """timm imports wandb whenever it is installed. W&B is off in the check, so a carried wandb that does not
    import on this machine must not stop it: it is then marked absent, which timm handles."""
    if importlib.util.find_spec("wandb") is None:
        return
    try:
        import wandb  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any failure means the same: go on without W&B
        print(
            f"warning: wandb does not import here ({type(error).__name__}: {error}); the check runs without it",
            file=sys.stderr,
        )
        sys.modules["wandb"] = None  # a later `import wandb` raises ImportError


def installed(name: str) -> str | None:
    """A distribution's installed version, read from its metadata (nothing is imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def version_warnings() -> list[str]:
    """Installed versions outside pyproject.toml's ranges (a warning: the check records what it ran on)."""
    try:
        from packaging.requirements import Requirement

        from vitladder.devtools.floors import dependencies  # the standard library only: none of the libraries
    except ImportError:  # Python 3.10 (no tomllib), or no packaging: nothing to compare with
        return []
    warnings = []
    for spec in dependencies(REPO / "pyproject.toml"):
        requirement = Requirement(spec)
        version = installed(requirement.name)
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            warnings.append(f"{requirement.name} {version} is outside {requirement.specifier}")
        # not installed: not needed by the check (e.g. wandb when W&B is off)
    return warnings


def report_versions() -> None:
    """The libraries the check runs on, and those outside pyproject.toml's ranges, before any of them is imported:
    a library too old to import still gets its warning."""
    versions = ", ".join(f"{dist} {installed(dist) or '-'}" for dist in (*NEEDED.values(), "wandb"))
    print(f"[gpu-check] Python {sys.version.split()[0]}; {versions}", flush=True)
    for warning in version_warnings():
        print(f"warning: {warning} (pyproject.toml)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for the whole check (default: 480; 150 with --smoke)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="a new or empty folder (default: outputs/gpu-check/<date-time>)"
    )
    parser.add_argument(
        "--data",
        default=None,
        help=f"CIFAR-10 as a folder or .tar(.xz) archive of train/ and test/, or 'synthetic' "
        f"(default: {DEFAULT_ARCHIVE.relative_to(REPO)}; synthetic with --smoke when absent)",
    )
    parser.add_argument("--smoke", action="store_true", help="the CPU rehearsal: the smoke profile's width and data")
    parser.add_argument("--settings", default="eager,compiled", help="benchmarked settings: eager, compiled or both")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every config, e.g. analysis.num_images=500")
    args = parser.parse_args(argv)

    report_versions()
    missing = [dist for module, dist in NEEDED.items() if importlib.util.find_spec(module) is None]
    if missing:
        print(
            f"error: {', '.join(missing)} not importable: install the carried wheels first (make gpu-check does: "
            "pip install --no-index --no-deps --target gpu/site gpu/wheels/*.whl, then PYTHONPATH=src:gpu/site)",
            file=sys.stderr,
        )
        raise SystemExit(2)  # as reports_user_errors would, which needs the packages missing here

    guard_wandb()
    from vitladder.cli import reports_user_errors

    return reports_user_errors(run)(args)


def run(args: argparse.Namespace) -> dict:
    from vitladder.devtools.gpu_check import SETTINGS, CheckOptions, run_check
    from vitladder.errors import UserError

    settings = tuple(s.strip() for s in args.settings.split(",") if s.strip())
    if not settings or any(s not in SETTINGS for s in settings):
        raise UserError(f"--settings {args.settings!r}: choose from {', '.join(SETTINGS)}, comma-separated")
    data = args.data
    if data is None:
        data = str(DEFAULT_ARCHIVE) if DEFAULT_ARCHIVE.exists() or not args.smoke else "synthetic"
    if data != "synthetic" and not Path(data).exists():
        raise UserError(
            f"no CIFAR-10 at {data}: run `make gpu-wheels` where the data is (it copies "
            "../shared/data/cifar10-jpeg.tar.xz into gpu/data/), or pass --data PATH"
        )
    out = args.out or Path("outputs") / "gpu-check" / time.strftime("%Y%m%d-%H%M%S")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already holds files: give --out a new or empty folder")
    budget = args.budget if args.budget is not None else (150.0 if args.smoke else 480.0)
    if budget <= 0:
        raise UserError(f"--budget {budget}: give a number of seconds above 0, e.g. --budget 480")

    for name in ("lightning.pytorch", "lightning.fabric"):  # a trainer per measurement: no banners
        logging.getLogger(name).setLevel(logging.WARNING)
    options = CheckOptions(
        out=out, budget_s=budget, data=data, smoke=args.smoke, settings=settings, overrides=tuple(args.overrides)
    )
    result = run_check(options, log=lambda line: print(f"[gpu-check] {line}", flush=True))
    print((out / "gpu_check.md").read_text())
    print(f"[gpu-check] wall {result['wall_s']:.0f} s of {budget:.0f}; everything in {out}")
    return result


if __name__ == "__main__":
    main()
