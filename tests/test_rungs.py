"""A rung is one file: conf/step/<rung>.yaml gives its delta, its parent (the ladder's order), its description
and reference figures; the README's table agrees with it; a new file is a new rung with no Python edited."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from extensions import add_grad_clip_rung, copy_project
from omegaconf import OmegaConf
from tiny_data import tiny_data

from vitladder.config import CONF_DIR, compose_rung, flatten, get_rung, ladder, read_ladder, rung_names
from vitladder.errors import UserError

TINY = ["profile=smoke", *tiny_data(num_train=300, num_test=100, val_size=100, batch_size=64)]
RUNG_YAML = """\
# @package _global_
{defaults}
rung: {name}
rung_info:
  {name}:
    description: {description}
{extra}"""


def write_rung(
    step_dir: Path,
    name: str,
    parent: str | None,
    description: str = "what it adds",
    extra: str = "",
    defaults: str | None = None,
) -> None:
    if defaults is None:
        defaults = f"defaults:\n  - {parent}\n  - _self_\n" if parent else ""
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / f"{name}.yaml").write_text(
        RUNG_YAML.format(defaults=defaults, name=name, description=description, extra=extra)
    )


def test_the_ladder_is_the_chain_of_parents_not_the_file_names(tmp_path):
    write_rung(tmp_path, "zeta", None)
    write_rung(
        tmp_path,
        "alpha",
        "zeta",
        "second",
        extra="    reference: {test_acc: 0.5, layer1_distance_px: 1.0, uniform_distance_px: 2.0}\n",
    )
    write_rung(tmp_path, "mid", None, defaults="defaults:\n  - /step/alpha@_here_\n  - /data: synthetic\n  - _self_\n")
    rungs = read_ladder(tmp_path)
    assert [(r.name, r.parent) for r in rungs] == [("zeta", None), ("alpha", "zeta"), ("mid", "alpha")]
    assert rungs[1].description == "second" and rungs[1].reference == {
        "test_acc": 0.5,
        "layer1_distance_px": 1.0,
        "uniform_distance_px": 2.0,
    }
    assert rungs[0].reference == {} and rungs[2].reference == {}


@pytest.mark.parametrize(
    "files, message",
    [
        ([("a", None), ("b", "nope")], r"b.yaml: builds on 'nope', which has no .*nope.yaml; choose one of a, b"),
        ([("a", None), ("b", None)], r"2 rungs build on no other \(a, b\)"),
        ([("a", None), ("b", "a"), ("c", "a")], r"rungs b and c both build on a; the ladder is one chain"),
        (
            [("a", None), ("b", "c"), ("c", "b")],
            r"rungs b, c build on each other in a loop; let one of them build on a",
        ),
    ],
)
def test_a_ladder_that_is_not_one_chain_is_one_line_saying_what_to_fix(tmp_path, files, message):
    for name, parent in files:
        write_rung(tmp_path, name, parent)
    with pytest.raises(UserError, match=message):
        read_ladder(tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("rung: a\n", r"a.yaml: no rung_info.a block: give it a one-line description"),
        ("rung: b\nrung_info: {a: {description: x}}\n", r"a.yaml: rung: b must be the file's name, rung: a"),
        ("rung: a\nrung_info: {a: {description: x, reference: {test_acc: high}}}\n", r"a.yaml: .*test_acc"),
        ("rung: a\nrung_info: {a: {description: x, figures: 1}}\n", r"a.yaml: .*figures"),
        (
            "defaults: epochs200\nrung: a\nrung_info: {a: {description: x}}\n",
            r"a.yaml: defaults must be a list, e.g. defaults: \[epochs200, _self_\]$",
        ),
        (
            "defaults: [b, /step/c@_here_, _self_]\nrung: a\nrung_info: {a: {description: x}}\n",
            r"a.yaml: defaults name 2 rungs \(b, c\); a rung builds on one$",
        ),
    ],
)
def test_a_malformed_rung_file_is_one_line_naming_it(tmp_path, text, message):
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(UserError, match=message):
        read_ladder(tmp_path)


def test_hydra_composes_each_rung_from_the_chain_the_ladder_reads():
    """rung_info of a composed rung: one entry per rung it builds on, bottom first, as Hydra followed the
    defaults; so the ladder's order is Hydra's and each rung's info its own (a rung inherits no figures)."""
    names = rung_names()
    assert names[0] == "patch8" and names[-1] == "epochs200" and len(names) == len(list((CONF_DIR / "step").glob("*")))
    for position, rung in enumerate(names):
        info = compose_rung(rung).rung_info
        assert list(info) == list(names[: position + 1]), rung
        assert info[rung].description == get_rung(rung).description
        assert OmegaConf.to_container(info[rung].reference) == get_rung(rung).reference


def test_the_wandb_config_keeps_rung_index_and_leaves_rung_info_out():
    """W&B's config is the resolved config as before rung_info existed, plus the rung's ladder position."""
    from vitladder.wandb.run import wandb_config

    cfg = compose_rung("warmup")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    del resolved["rung_info"]
    assert wandb_config(cfg) == {**resolved, "rung_index": rung_names().index("warmup")}


README_ROW = re.compile(r"^\| `(?P<rung>[a-z0-9_]+)` \| (?P<adds>[^|]+) \| (?P<delta>[^|]+) \| (?P<ref>[^|]+) \|$")


def readme_ladder_table(readme: str) -> list[dict]:
    start = readme.index("| rung (`step=`) | adds | config delta | reference test acc. |")
    table = readme[start:].split("\n\n")[0].splitlines()[2:]
    rows = [README_ROW.match(line) for line in table]
    assert all(rows), table
    return [row.groupdict() for row in rows]


def yaml_delta(rung: str) -> str:
    """The README's "config delta" of a rung: its YAML without defaults, name and info, as `key: value`."""
    delta = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "step" / f"{rung}.yaml"))
    for key in ("defaults", "rung", "rung_info"):
        delta.pop(key, None)
    return ", ".join(f"`{key}: {json.dumps(value)}`" for key, value in flatten(delta).items()) or "(the base config)"


def test_the_readme_ladder_table_is_the_yaml(repo_root):
    rows = readme_ladder_table((repo_root / "README.md").read_text())
    assert [row["rung"] for row in rows] == list(rung_names()), "the README lists the rungs in ladder order"
    for row, rung in zip(rows, ladder()):
        assert row["adds"] == rung.description, rung.name
        assert row["delta"] == yaml_delta(rung.name), rung.name
        assert row["ref"] == (f"{rung.reference['test_acc']:.1%}" if rung.reference else "—"), rung.name


# Run in a copy of the project with conf/step/grad_clip.yaml added: the ladder's plan, the composed
# config, an unknown rung's message and the report of a ladder folder where grad_clip and epochs200 finished.
CHECK_THE_COPY = """\
import json, sys
from pathlib import Path
from vitladder.config import check_rung
from vitladder.errors import UserError
from vitladder.report.ladder_report import build_report
from vitladder.training.ladder import plan_ladder

runs = plan_ladder([0], sys.argv[2:])
top = runs[-1].cfg
try:
    check_rung("patch5")
except UserError as error:
    unknown = str(error)
ladder = Path(sys.argv[1])
for rung in ("epochs200", "grad_clip"):
    (ladder / rung).mkdir(parents=True)
    (ladder / rung / "done.json").write_text(json.dumps({"test_acc": 0.5, "seed": 0}))
report = build_report(ladder).read_text()
print(json.dumps({"plan": [r.rung for r in runs], "clip": top.trainer.gradient_clip_val, "epochs": top.optim.epochs,
                  "info": list(top.rung_info), "reference": top.rung_info.grad_clip.reference, "unknown": unknown,
                  "rows": [line for line in report.split("## What")[0].splitlines() if line.startswith("| `")]}))
"""


@pytest.fixture
def project_with_grad_clip(repo_root, tmp_path) -> Path:
    """A copy of the project with one more file: conf/step/grad_clip.yaml."""
    copy = copy_project(repo_root, tmp_path / "project")
    add_grad_clip_rung(copy)
    return copy


@pytest.mark.slow  # a child process under a project copy (tests/test_extension_points.py trains the rung)
def test_a_new_rung_file_is_a_rung_with_no_python_edited(project_with_grad_clip, tmp_path, child_env):
    copy = project_with_grad_clip
    env = child_env(PYTHONPATH=str(copy / "src"))
    checked = subprocess.run(
        [sys.executable, "-c", CHECK_THE_COPY, str(tmp_path / "ladder"), *TINY],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    seen = json.loads(checked.stdout.splitlines()[-1])
    assert seen["plan"] == [*rung_names(), "grad_clip"], "make ladder trains it last"
    assert seen["clip"] == 1.0 and seen["epochs"] == 200, "its delta on top of epochs200"
    assert seen["info"] == [*rung_names(), "grad_clip"] and seen["reference"] is None
    assert seen["unknown"] == f"unknown rung 'patch5': choose one of {', '.join(rung_names())}, grad_clip"
    rows = {row.split("`")[1]: [cell.strip() for cell in row.split("|")[1:-1]] for row in seen["rows"]}
    assert list(rows) == [*rung_names(), "grad_clip"]
    # the ladder table: rung | adds | test acc. | ref. | layer-1 distance | ref. | uniform | ...
    assert rows["grad_clip"][1:6] == ["gradient clipping at norm 1", "50.0%", "—", "—", "—"]
    assert rows["epochs200"][3] == f"{get_rung('epochs200').reference['test_acc']:.1%}"
