"""The rungs as Hydra configs: each composes, and each differs from the one before by exactly its delta."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from vitladder.config import CONF_DIR, compose_rung, flatten, rung_names, scale_epochs, scaled_epochs
from vitladder.errors import UserError


def compose_base(overrides=()):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def resolved(cfg) -> dict:
    return flatten(OmegaConf.to_container(cfg, resolve=True))


def step_delta(rung: str) -> dict:
    delta = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "step" / f"{rung}.yaml"))
    delta.pop("defaults", None)
    return flatten(delta)


def test_rung_files_match_the_ladder():
    assert sorted(p.stem for p in (CONF_DIR / "step").glob("*.yaml")) == sorted(rung_names())
    for previous, rung in zip(rung_names(), rung_names()[1:]):
        defaults = OmegaConf.load(CONF_DIR / "step" / f"{rung}.yaml").defaults
        assert list(defaults) == [previous, "_self_"], f"{rung} must build on {previous}"


@pytest.mark.parametrize("profile", ["full", "smoke", "laptop"])
def test_each_rung_differs_from_the_one_before_by_exactly_its_delta(profile):
    previous = resolved(compose_base([f"profile={profile}"]))
    for rung in rung_names():
        current = resolved(compose_rung(rung, [f"profile={profile}"]))
        delta = step_delta(rung)
        changed = {key for key in current if current[key] != previous.get(key)}
        # Interpolated keys follow: run_dir (and the Trainer's default_root_dir) the rung's name,
        # trainer.max_epochs optim.epochs; everything else that changed is in the delta.
        derived = {"run_dir", "trainer.default_root_dir", "trainer.max_epochs"}
        assert changed - derived == {key for key in delta if previous.get(key) != delta[key]}, rung
        assert current["trainer.default_root_dir"] == current["run_dir"]
        assert current["trainer.max_epochs"] == scale_epochs(current["optim.epochs"], current["profile.epoch_scale"])
        assert all(current[key] == value for key, value in delta.items()), rung
        assert current["rung"] == rung
        previous = current


def test_the_ladder_turns_on_each_fix_in_turn():
    top = compose_rung("epochs200")
    assert top.model.patch_size == 4 and top.data.random_crop_padding == 4 and top.data.horizontal_flip
    assert top.optim.warmup_epochs > 0 and top.loss.label_smoothing == 0.1
    assert top.mixup.mixup_alpha > 0 and top.mixup.cutmix_alpha > 0 and top.model.drop_path_rate > 0
    assert top.optim.epochs == 200 and top.trainer.max_epochs == 200
    bottom = compose_rung("patch8")
    assert bottom.model.patch_size == 8 and bottom.data.random_crop_padding == 0
    assert bottom.optim.warmup_epochs == 0 and bottom.loss.label_smoothing == 0
    assert bottom.mixup.mixup_alpha == 0 and bottom.mixup.cutmix_alpha == 0 and bottom.model.drop_path_rate == 0
    assert bottom.trainer.max_epochs == 100


def test_smoke_profile_keeps_the_shape_and_shrinks_the_rest():
    smoke = compose_rung("epochs200", ["profile=smoke"])
    assert (smoke.model.depth, smoke.model.num_heads) == (7, 6)
    assert smoke.model.embed_dim < 384 and smoke.data.source == "synthetic"
    assert scaled_epochs(smoke) == (2, pytest.approx(0.05))
    assert scaled_epochs(compose_rung("patch8", ["profile=smoke"]))[0] == 1
    assert compose_rung("patch8", ["profile=smoke", "data=cifar10"]).data.source == "cifar10"
    assert smoke.run_dir == "outputs/smoke/epochs200"


SMOKE_SENTENCE = re.compile(
    r"`smoke` \(same (?P<depth>\d+) × (?P<heads>\d+) shape at width (?P<width>\d+),\s+(?P<percent>\d+)% of each "
    r"rung's epochs — (?P<first>\d+) epochs?, (?P<top>\d+) for `epochs200` — on (?P<train>[\d,]+) synthetic "
    r"training images,\s+(?P<val>[\d,]+) validation images and (?P<test>[\d,]+) test images"
)


def test_the_readmes_smoke_figures_are_conf_profile_smoke_yaml(repo_root):
    readme = " ".join((repo_root / "README.md").read_text().split())  # one line: sentences wrap anywhere
    said = SMOKE_SENTENCE.search(readme)
    assert said, "the README describes the smoke profile in one sentence (SMOKE_SENTENCE)"
    figures = {key: int(value.replace(",", "")) for key, value in said.groupdict().items()}
    first, top = compose_rung("patch8", ["profile=smoke"]), compose_rung("epochs200", ["profile=smoke"])
    assert figures == {
        "depth": first.model.depth,
        "heads": first.model.num_heads,
        "width": first.model.embed_dim,
        "percent": round(100 * first.profile.epoch_scale),
        "first": first.trainer.max_epochs,
        "top": top.trainer.max_epochs,
        "train": first.data.train_subset,
        "val": first.data.val_size,
        "test": first.data.test_subset,
    }
    analysed = re.search(r"over the first ([\d,]+) test images \(([\d,]+) on the smoke profile\)", readme)
    assert analysed and int(analysed[2]) == first.analysis.num_images
    assert int(analysed[1].replace(",", "")) == compose_rung("patch8", []).analysis.num_images


CHOSEN = re.compile(r"^\| `(?P<key>[a-z_]+\.[a-z_]+)`[^|]*\| \**(?P<value>\(?[0-9][0-9.e,\- ]*\)?)", re.MULTILINE)


def test_docs_recipe_md_gives_the_values_conf_holds(repo_root):
    """docs/recipe.md's table of the values chosen is the top rung's composed recipe (the full profile)."""
    chosen = {m["key"]: m["value"].strip(" ,") for m in CHOSEN.finditer((repo_root / "docs/recipe.md").read_text())}
    assert len(chosen) == 8, chosen  # every row but mixup.*, whose values are words
    top = compose_rung("epochs200", [])
    for key, value in chosen.items():
        numbers = [float(n.replace(",", "")) for n in re.findall(r"[0-9][0-9.e\-,]*[0-9]|[0-9]", value)]
        stored = OmegaConf.select(top, key)
        assert numbers == (list(stored) if key == "optim.betas" else [stored]), key
    assert (top.mixup.mixup_alpha, top.mixup.cutmix_alpha, top.mixup.prob) == (0.8, 1.0, 1.0)


def test_seeds_other_than_zero_get_their_own_folder():
    assert compose_rung("warmup", ["seed=0"]).run_dir == "outputs/full/warmup"
    assert compose_rung("warmup", ["seed=1"]).run_dir == "outputs/full/warmup-seed1"


def test_unknown_rung_is_a_user_error_naming_the_rungs():
    with pytest.raises(UserError, match="patch8, augment, patch4"):
        compose_rung("patch16")


def run_train(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "train.py", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cfg_job_prints_the_resolved_rung(repo_root):
    result = run_train("step=warmup", "--cfg", "job", "--resolve", cwd=repo_root)
    assert result.returncode == 0, result.stderr
    printed = OmegaConf.create(result.stdout)
    assert printed.rung == "warmup" and printed.optim.warmup_epochs == 5 and printed.model.patch_size == 4
    assert printed.run_dir == "outputs/full/warmup"


def test_unknown_rung_on_the_command_line_exits_non_zero_with_one_line(repo_root):
    result = run_train("+step=warmupp", cwd=repo_root)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "warmupp" in lines[0] and "label_smoothing" in lines[0]
    assert "Traceback" not in result.stderr


def test_no_rung_asks_for_one(repo_root):
    result = run_train("trainer.max_epochs=1", cwd=repo_root)
    assert result.returncode == 2 and "step=<rung>" in result.stderr


# --- the schema ---------------------------------------------------------------------------------------


def test_the_config_is_typed_by_the_schema():
    from vitladder.config_schema import Config, data_schemas

    cfg = compose_rung("warmup")
    assert OmegaConf.get_type(cfg) is Config
    schemas = data_schemas()
    assert sorted(schemas) == ["cifar10", "imagefolder", "synthetic"]
    for name, schema in schemas.items():
        overrides = [f"data={name}"] + (["data.root=x"] if name == "imagefolder" else [])
        assert OmegaConf.get_type(compose_rung("warmup", overrides), "data") is schema
    assert compose_rung("warmup", ["data=imagefolder", "data.root=x", "data.max_file_mib=0.5"]).data.max_file_mib == 0.5
    assert sorted(p.stem for p in (CONF_DIR / "data").glob("*.yaml")) == sorted(schemas)


def test_every_trainer_argument_is_in_the_schema_with_lightnings_default():
    import dataclasses
    import inspect

    import lightning as L

    from vitladder.config_schema import TrainerConfig

    supplied_by_the_run = {"self", "logger", "callbacks", "plugins"}
    parameters = {
        name: p.default
        for name, p in inspect.signature(L.Trainer.__init__).parameters.items()
        if name not in supplied_by_the_run
    }
    fields = {f.name: f.default for f in dataclasses.fields(TrainerConfig)}
    assert fields == parameters


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["optim.lrr=1"], "optim.lrr: no such key; did you mean optim.lr?"),
        (["+optim.lrr=1"], "optim.lrr: no such key; did you mean optim.lr?"),
        (["+trainer.max_epoch=3"], "trainer.max_epoch: no such key; did you mean trainer.max_epochs?"),
        (["data.num_train=5"], "data.num_train: no such key with data=cifar10; it belongs to data=synthetic"),
        (["+optim.lr=3"], "+optim.lr=3: optim.lr is already a key; set it without the +: optim.lr=3"),
        (
            ["trainer.max_epochs=abc"],
            "trainer.max_epochs='abc' is not valid: trainer.max_epochs takes an integer or null, "
            "e.g. trainer.max_epochs=100",
        ),
        (
            ["model.patch_size=1.5"],
            "model.patch_size='1.5' is not valid: model.patch_size takes an integer, e.g. model.patch_size=4",
        ),
        (
            ["optim.betas=3"],
            "optim.betas='3' is not valid: optim.betas takes a list of numbers, e.g. optim.betas=[0.9,0.999]",
        ),
        (["data.horizontal_flip=maybe"], "data.horizontal_flip takes true or false, e.g. data.horizontal_flip=true"),
        (["data=imagefolder"], "data.root has no value: give one on the command line, data.root=..."),
        (["profile=tiny"], "profile=tiny: no such choice (conf/profile/tiny.yaml); choose one of full, laptop, smoke"),
        (["data=../etc"], "data=../etc: no such choice (conf/data/../etc.yaml); choose one of cifar10, imagefolder"),
        (["data.batch_size=0"], "data.batch_size=0 is not valid: data.batch_size must be at least 1"),
        (["data.val_size=-5"], "data.val_size=-5 is not valid: data.val_size must be at least 0 (0: no validation"),
        (["seed=-1"], "seed=-1 is not valid: seed must be between 0 and 4294967295"),
        (
            ["wandb.mode=bogus"],
            "wandb.mode='bogus' is not valid: wandb.mode must be one of auto, online, offline, disabled",
        ),
        (["ladder=../../x"], "ladder='../../x' is not valid: ladder must be a plain folder name"),
        (["ladder=.hidden"], "ladder='.hidden' is not valid"),
        (
            ["data=imagefolder", "data.root=x", "data.max_file_mib=0"],
            "data.max_file_mib=0.0 is not valid: data.max_file_mib must be above 0",
        ),
        (["model.embed_dim=50"], "model.embed_dim=50 is not valid: it must be a multiple of model.num_heads=6"),
        (["trainer.max_epochs=null"], "trainer.max_epochs=null is not valid: trainer.max_epochs must be at least 1"),
        (["+zzzzzz=1"], "zzzzzz: no such key; the top level has analysis, checkpoint, data, ladder, loss, mixup"),
        (["optim=3"], "optim='3' is not valid: optim takes a block of keys, e.g. optim.epochs=..."),
    ],
)
def test_a_bad_override_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(UserError) as error:
        compose_rung("warmup", overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_wrong_type_gives_no_example_when_the_other_overrides_do_not_compose_either():
    with pytest.raises(UserError) as error:
        compose_rung("warmup", ["model.patch_size=1.5", "optim.lrr=1"])
    assert str(error.value) == "model.patch_size='1.5' is not valid: model.patch_size takes an integer"


@pytest.mark.parametrize("source", ["cifar10", "imagefolder", "synthetic"])
def test_each_declared_range_takes_its_own_example_and_the_rung_composes_with_it(source):
    # A key's valid values live on its schema field (config_schema.setting): the example its message offers
    # is itself valid, and that key is the one the message names when its check fails.
    from vitladder.config_schema import data_schemas, valid_values

    declared = valid_values(data_schemas()[source])
    assert {"seed", "ladder", "wandb.mode", "optim.lr", "data.batch_size", "trainer.max_epochs"} <= {
        key for key, *_ in declared
    }
    data = ["data=imagefolder", "data.root=/nonexistent"] if source == "imagefolder" else [f"data={source}"]
    for key, in_range, _, example in declared:
        value = OmegaConf.from_dotlist([f"v={example}"]).v
        assert in_range(value), f"{key}={example}"
        compose_rung("warmup", [*data, f"{key}={example}"])


def test_step_with_or_without_plus_and_trainer_arguments_without_plus():
    from vitladder.config import compose_config

    assert compose_config(["step=warmup"]) == compose_config(["+step=warmup"]) == compose_rung("warmup")
    cfg = compose_rung(
        "warmup",
        [
            "trainer.gradient_clip_val=1",
            "trainer.limit_train_batches=3",
            "trainer.val_check_interval=0.5",
            "trainer.deterministic=true",
        ],
    )
    assert cfg.trainer.gradient_clip_val == 1.0 and cfg.trainer.limit_train_batches == 3  # an int: a count
    assert cfg.trainer.val_check_interval == 0.5 and cfg.trainer.deterministic is True


def test_help_shows_the_rungs_groups_overrides_and_outputs(repo_root):
    result = run_train("--help", cwd=repo_root)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    positions = [text.index(f"  {rung} ") for rung in rung_names()]
    assert positions == sorted(positions), "the rungs in ladder order"
    for group in ("data", "profile"):
        options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        assert f"{group}={'|'.join(options)}" in text
    for needle in (
        "trainer.gradient_clip_val=1.0",
        "overwrite=true",
        "ladder=NAME",
        "outputs/<ladder>/<rung>/",
        "--cfg job --resolve",
        "-sc install=bash",
    ):
        assert needle in text, needle


def test_shell_completion_knows_the_schema(repo_root):
    env = {**os.environ, "COMP_LINE": "python train.py trainer.gradient_cl"}
    result = subprocess.run(
        [sys.executable, "train.py", "-sc", "query=bash"],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "trainer.gradient_clip_val=" in result.stdout.split()
