"""The lowest versions pyproject.toml allows, as ``==`` pins, so that the floors tested are the floors declared.

    python -m vitladder.devtools.floors [pyproject.toml] > floors.txt   # name==floor, one a line

``make test-floors`` installs the project with these as pip constraints into its own venv, then runs the fast tests
and a smoke rung there. torch and torchvision are left out: a registry's torch is a multi-gigabyte CUDA build, so
pip takes the newest the ranges (and this machine) allow, and their floors are checked call by call against each
call's first release instead (pyproject.toml's comments). Standard library only: it runs before anything is
installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"
NOT_PINNED = frozenset({"torch", "torchvision"})
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FLOOR = re.compile(r">=\s*([^,;\s]+)")


def dependencies(pyproject: Path = PYPROJECT) -> list[str]:
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def floor_pins(requirements: list[str]) -> list[str]:
    """``name==floor`` for every requirement's ``>=`` bound, torch and torchvision left out."""
    floors = ((_NAME.match(spec)[0], _FLOOR.search(spec.split(";")[0])) for spec in requirements)
    return [f"{name}=={floor[1]}" for name, floor in floors if floor and name.lower() not in NOT_PINNED]


if __name__ == "__main__":
    print("\n".join(floor_pins(dependencies(Path(sys.argv[1]) if len(sys.argv) > 1 else PYPROJECT))))
