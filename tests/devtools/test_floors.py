"""make test-floors installs exactly the lowest versions pyproject.toml allows: the pins come from its `>=` bounds,
every runtime dependency has one, and torch and torchvision are left to the ranges (this machine's wheels)."""

from __future__ import annotations

import subprocess

from packaging.requirements import Requirement

from vitladder.devtools.floors import NOT_PINNED, dependencies, floor_pins


def test_every_runtime_dependency_has_a_floor_and_each_but_torchs_is_pinned(repo_root):
    declared = dependencies(repo_root / "pyproject.toml")
    pins = {Requirement(pin).name: str(Requirement(pin).specifier) for pin in floor_pins(declared)}
    for spec in map(Requirement, declared):
        floors = [s.version for s in spec.specifier if s.operator == ">="]
        assert len(floors) == 1, f"{spec.name} declares no floor"
        assert pins.get(spec.name) == (None if spec.name in NOT_PINNED else f"=={floors[0]}"), spec.name
    assert NOT_PINNED <= {Requirement(spec).name for spec in declared}


def test_pins_read_the_floor_of_any_requirement_form():
    assert floor_pins(["a-b[x]>=1.2,<2; python_version >= '3.8'", "c>=0.4.13", "torch>=2.6,<2.15", "d<3"]) == [
        "a-b==1.2",
        "c==0.4.13",
    ]


def test_make_test_floors_installs_the_pins_in_a_venv_of_its_own_then_tests_and_trains_there(repo_root):
    dry_run = subprocess.run(
        ["make", "-n", "-B", "test-floors"], cwd=repo_root, capture_output=True, text=True, check=True
    ).stdout
    assert "-m vitladder.devtools.floors > .venv-floors/floors.txt" in dry_run
    assert "install --quiet -c .venv-floors/floors.txt -e '.[test]'" in dry_run
    assert ".venv-floors/bin/python -m pytest" in dry_run and ".venv-floors/bin/python train.py" in dry_run
