"""The rungs as Hydra configs: each composes, and each differs from the one before by exactly its delta."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from vitladder.config import CONF_DIR, RUNGS, compose_rung, scale_epochs, scaled_epochs, seed_suffix
from vitladder.errors import UserError


def flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def compose_base(overrides=()):
    from hydra import compose, initialize_config_dir

    from vitladder.config import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def resolved(cfg) -> dict:
    return flatten(OmegaConf.to_container(cfg, resolve=True))


def step_delta(rung: str) -> dict:
    delta = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "step" / f"{rung}.yaml"))
    delta.pop("defaults", None)
    return flatten(delta)


def test_rung_files_match_the_ladder():
    assert sorted(p.stem for p in (CONF_DIR / "step").glob("*.yaml")) == sorted(RUNGS)
    for previous, rung in zip(RUNGS, RUNGS[1:]):
        defaults = OmegaConf.load(CONF_DIR / "step" / f"{rung}.yaml").defaults
        assert list(defaults) == [previous, "_self_"], f"{rung} must build on {previous}"


@pytest.mark.parametrize("profile", ["full", "smoke"])
def test_each_rung_differs_from_the_one_before_by_exactly_its_delta(profile):
    previous = resolved(compose_base([f"profile={profile}"]))
    for rung in RUNGS:
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


def test_seeds_other_than_zero_get_their_own_folder():
    assert seed_suffix(0) == "" and seed_suffix(2) == "-seed2"
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
