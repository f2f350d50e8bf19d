"""A run folder is reused only under the same recipe: a changed config stops with what changed, overwrite=true
moves the old run aside (never deletes it), keys outside the recipe change nothing."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import lightning
import pytest
from omegaconf import OmegaConf

from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.report.ladder_report import collect
from vitladder.run_folder import RunPaths, read_summary
from vitladder.training import recipe
from vitladder.training.recipe import ABSENT, changed_recipe_message, in_recipe, recipe_changes, set_aside


def test_changes_list_recipe_keys_only():
    stored = {
        "optim": {"lr": 0.002, "betas": [0.9, 0.999]},
        "trainer": {"enable_progress_bar": True},
        "wandb": {"mode": "online"},
        "output_root": "a",
        "old_key": 1,
    }
    current = {
        "optim": {"lr": 0.5, "betas": [0.9, 0.999]},
        "trainer": {"enable_progress_bar": False},
        "wandb": {"mode": "disabled"},
        "output_root": "b",
        "new_key": None,
    }
    assert recipe_changes(stored, current) == [
        ("new_key", ABSENT, None),
        ("old_key", 1, ABSENT),
        ("optim.lr", 0.002, 0.5),
    ]
    assert not in_recipe("wandb.project") and not in_recipe("analysis.batch_size") and in_recipe("analysis.num_images")
    assert not in_recipe("data.eval_batch_size") and in_recipe("data.batch_size")
    assert in_recipe("trainer.gradient_clip_val") and in_recipe("data.batch_size") and in_recipe("wandb_like")


def test_a_setting_added_or_removed_since_is_no_change_at_its_default():
    stored = {"optim": {"lr": 0.002, "gone": 1, "gone_changed": 2}, "trainer": {"max_epochs": 3}}
    current = {"optim": {"lr": 0.002, "new": 0.5, "new_changed": 7}, "trainer": {"max_epochs": 3, "barebones": False}}
    then = {"optim.gone": 1, "optim.gone_changed": 1}
    now = {"optim.new": 0.5, "optim.new_changed": 5, "trainer.barebones": False}
    assert recipe_changes(stored, current, then, now) == [
        ("optim.gone_changed", 2, ABSENT),
        ("optim.new_changed", ABSENT, 7),
    ]
    assert len(recipe_changes(stored, current)) == 5, "without defaults every added or removed key is a change"


def test_the_message_lists_changes_and_both_ways_on(tmp_path):
    changes = [(f"k{i}", i, i + 1) for i in range(8)]
    message = changed_recipe_message(tmp_path / "patch4", changes, finished=False)
    assert "\n" not in message and "an interrupted run of another recipe (k0 0 → 1" in message
    assert "k5 5 → 6 and 2 more)" in message and "k6" not in message
    assert "ladder=NAME" in message and "make ladder LADDER=NAME" in message
    assert "overwrite=true" in message and "patch4.replaced-<time>/" in message
    made = changed_recipe_message(tmp_path / "p", changes[:1], True, ["lightning 2.5.2 → 2.6.6", "timm 1.0 → 1.1"])
    assert "another recipe (k0 0 → 1; made with lightning 2.5.2 → 2.6.6, timm 1.0 → 1.1): to keep it" in made
    unknown = changed_recipe_message(tmp_path / "p", [], True)
    assert unknown.startswith(f"{tmp_path / 'p'} holds a finished run whose config.yaml is missing or unreadable, so ")
    assert "its recipe is unknown: to keep it" in unknown and "\n" not in unknown
    unknown = changed_recipe_message(tmp_path / "p", [], False, ["timm 1.0 → 1.1"])
    assert (
        "an interrupted run whose config.yaml is missing or unreadable, so its recipe is unknown (made with timm"
        in unknown
    )


def test_a_rung_is_reused_only_under_the_same_recipe(tiny_cfg):
    base = ("analysis.enabled=false",)
    cfg = tiny_cfg("patch8", *base)
    first = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    stamps = {path: path.stat().st_mtime_ns for path in (paths.done, paths.config, paths.last_ckpt)}

    # Keys that cannot change the results: the finished rung is skipped untouched.
    outside = tiny_cfg(
        "patch8",
        *base,
        "trainer.log_every_n_steps=1",
        "wandb.mode=disabled",
        "analysis.batch_size=7",
        "data.eval_batch_size=3",
        "speed.compile=true",
    )
    assert train_rung(outside) == first

    # Another recipe: one line naming the changes (old → new) and the two ways on; nothing touched.
    changed = tiny_cfg("patch8", *base, "optim.lr=0.5", "trainer.gradient_clip_val=1")
    with pytest.raises(UserError) as refused:
        train_rung(changed)
    message = str(refused.value)
    assert message.startswith(f"{paths.root} holds a finished run of another recipe (")
    assert "optim.lr 0.002 → 0.5, trainer.gradient_clip_val null → 1.0)" in message
    assert "ladder=NAME" in message and "overwrite=true" in message

    # Interrupted (last.ckpt, no done.json): not resumed under another recipe either.
    summary = paths.done.read_text()
    paths.done.unlink()
    with pytest.raises(UserError, match="holds an interrupted run of another recipe"):
        train_rung(changed)
    paths.done.write_text(summary)
    assert {path: path.stat().st_mtime_ns for path in stamps if path != paths.done} == {
        path: stamp for path, stamp in stamps.items() if path != paths.done
    }

    # overwrite=true: the old folder moves aside whole, the rung trains afresh under the new recipe.
    replaced = train_rung(tiny_cfg("patch8", *base, "optim.lr=0.5", "trainer.gradient_clip_val=1", "overwrite=true"))
    moved = [p for p in paths.root.parent.iterdir() if p.name.startswith("patch8.replaced-")]
    assert len(moved) == 1
    old = RunPaths(moved[0])
    assert old.done.read_text() == summary and old.last_ckpt.is_file()
    assert OmegaConf.load(old.config).optim.lr == pytest.approx(0.002)
    assert OmegaConf.load(paths.config).optim.lr == 0.5
    assert replaced == read_summary(paths.root) and paths.done.stat().st_mtime_ns > stamps[paths.done]
    # The report reads the rung's folder, not the replaced one.
    assert [run.path for result in collect(paths.root.parent) for run in result.runs] == [paths.root]


def test_overwrite_never_moves_a_folder_another_process_is_training_in(tmp_path):
    from vitladder.training.recipe import RunLocked, run_lock, set_aside

    paths = RunPaths(tmp_path / "smoke" / "patch8")
    paths.root.mkdir(parents=True)
    paths.done.write_text("{}")
    with run_lock(paths.root):  # held as a training process holds it
        with pytest.raises(RunLocked, match="in use by another process"):
            set_aside(paths)
    assert paths.done.is_file() and [p.name for p in paths.root.parent.iterdir()] == ["patch8"]
    set_aside(paths)  # once free, it moves
    assert [p.name.split("-")[0] for p in paths.root.parent.iterdir()] == ["patch8.replaced"]


def test_runs_set_aside_in_the_same_second_get_numbered_folders(tmp_path, monkeypatch):
    same_second = SimpleNamespace(strftime=lambda fmt: "20260101-120000")  # every one set aside in the same second
    monkeypatch.setattr(recipe, "time", same_second)
    paths = RunPaths(tmp_path / "smoke" / "patch8")
    for attempt in range(3):
        paths.root.mkdir(parents=True)
        paths.done.write_text(json.dumps({"attempt": attempt}))
        set_aside(paths)
    assert not paths.root.exists()
    moved = {p.name: json.loads(RunPaths(p).done.read_text())["attempt"] for p in paths.root.parent.iterdir()}
    stamp = "patch8.replaced-20260101-120000"
    assert moved == {stamp: 0, f"{stamp}-2": 1, f"{stamp}-3": 2}, "each old run kept whole, none overwritten"


def test_rung_info_is_not_the_recipe(tiny_cfg):
    """A reworded description, new reference figures, or a config.yaml from before rung_info existed: the
    finished rung is still this recipe and is skipped, not refused as "another recipe"."""
    cfg = tiny_cfg("augment", "analysis.enabled=false", "wandb.mode=disabled")
    current = OmegaConf.to_container(cfg, resolve=True)
    reworded = OmegaConf.to_container(cfg, resolve=True)
    reworded["rung_info"]["augment"]["description"] = "random crop (pad 4) + horizontal flip"
    reworded["rung_info"]["patch8"]["reference"] = None
    before = {key: value for key, value in current.items() if key != "rung_info"}
    assert recipe_changes(reworded, current) == [] and recipe_changes(before, current) == []
    assert recipe_changes({**before, "model": {**before["model"], "patch_size": 4}}, current) != []

    first = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    for stored in (reworded, before):
        paths.config.write_text(OmegaConf.to_yaml(stored))
        assert train_rung(cfg) == first, "skipped as finished under the same recipe"


def drop(tree: dict, *keys: str) -> dict:
    """``tree`` without the dotted ``keys``, as a config.yaml written before they existed."""
    for key in keys:
        *path, name = key.split(".")
        node = tree
        for part in path:
            node = node[part]
        del node[name]
    return tree


def test_an_upgrade_keeps_a_finished_run_of_the_same_recipe(tiny_cfg):
    """A config.yaml of an older Lightning (no trainer.barebones, trainer.model_registry) and an older project
    (no optim.warmup_start_lr, mixup.switch_prob) is the same recipe while those stand at their defaults; set
    one of them on the command line and the run is another recipe, named with what made the folder."""
    cfg = tiny_cfg("patch8", "analysis.enabled=false", "wandb.mode=disabled")
    first = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    made = json.loads(paths.provenance.read_text())
    libraries = {"torch", "lightning", "timm", "hydra-core", "wandb"}
    assert set(made["versions"]) == {"vitladder", "git_commit", "python", *libraries}
    assert made["versions"]["lightning"] == lightning.__version__ and made["versions"]["git_commit"]
    assert made["defaults"]["trainer.model_registry"] is None and made["defaults"]["mixup.switch_prob"] == 0.5

    old_keys = (
        "trainer.barebones",
        "trainer.model_registry",
        "optim.warmup_start_lr",
        "mixup.switch_prob",
        "data.eval_batch_size",  # added with the probes: a run finished before them is kept
        "analysis.probes",
        "analysis.settings",
    )
    stored = drop(OmegaConf.to_container(OmegaConf.load(paths.config)), *old_keys)
    paths.config.write_text(OmegaConf.to_yaml(stored))
    made["versions"]["lightning"] = "2.5.2"
    paths.provenance.write_text(json.dumps(made))
    stamp = paths.done.stat().st_mtime_ns
    assert train_rung(cfg) == first and paths.done.stat().st_mtime_ns == stamp, "skipped untouched"

    for override, named in (
        ("trainer.model_registry=mine", "trainer.model_registry (absent) → mine"),
        ("mixup.switch_prob=0.25", "mixup.switch_prob (absent) → 0.25"),
    ):
        with pytest.raises(UserError) as refused:
            train_rung(tiny_cfg("patch8", "analysis.enabled=false", "wandb.mode=disabled", override))
        assert f"another recipe ({named}; made with lightning 2.5.2 → {lightning.__version__}" in str(refused.value)


def test_a_setting_removed_since_is_one_warning_if_it_stood_at_its_default(tiny_cfg):
    cfg = tiny_cfg("patch8", "analysis.enabled=false", "wandb.mode=disabled")
    first = train_rung(cfg)
    paths = RunPaths(Path(cfg.run_dir))
    made = json.loads(paths.provenance.read_text())
    stored = OmegaConf.to_container(OmegaConf.load(paths.config))

    def older_version_wrote(value: bool, default_then: bool | None) -> None:
        stored["trainer"]["retired_flag"] = value  # a Trainer argument this version no longer has
        paths.config.write_text(OmegaConf.to_yaml(stored))
        defaults = {**made["defaults"], "trainer.retired_flag": default_then}
        paths.provenance.write_text(json.dumps({**made, "defaults": defaults}))

    older_version_wrote(False, default_then=False)
    with pytest.warns(UserWarning) as warned:
        assert train_rung(cfg) == first
    (message,) = {str(w.message) for w in warned if w.category is UserWarning}
    assert message == (
        f"{paths.root}: trainer.retired_flag no longer is a setting; the run stood at the default, "
        "so it is kept as the same recipe"
    )
    older_version_wrote(True, default_then=False)  # it was set: the run is another recipe
    with pytest.raises(UserError, match=r"another recipe \(trainer.retired_flag true → \(absent\)\)"):
        train_rung(cfg)
    older_version_wrote(False, default_then=False)
    paths.provenance.unlink()  # a folder from before provenance.json: the default it had is unknown
    with pytest.raises(UserError, match=r"another recipe \(trainer.retired_flag false → \(absent\)\)"):
        train_rung(cfg)


@pytest.fixture
def fresh_versions():
    """versions() read again in the test, and again after it: it is cached for the process."""
    recipe.versions.cache_clear()
    yield recipe.versions
    recipe.versions.cache_clear()


@pytest.mark.parametrize(
    "git_fails",
    [FileNotFoundError(2, "No such file or directory", "git"), recipe.subprocess.TimeoutExpired(["git"], 10)],
    ids=["no git", "git hangs"],
)
def test_without_git_or_a_packages_metadata_the_versions_say_none(fresh_versions, monkeypatch, git_fails):
    def git(*args, **kwargs):
        raise git_fails

    monkeypatch.setattr(recipe.subprocess, "run", git)
    monkeypatch.setattr(recipe, "LIBRARIES", ("lightning", "no-such-package-here"))
    found = fresh_versions()
    assert found["git_commit"] is None and found["no-such-package-here"] is None
    assert found["lightning"] == lightning.__version__


def test_a_checkout_of_another_project_names_no_commit(fresh_versions, monkeypatch, tmp_path):
    # An installed copy inside someone else's repository: git answers with that repository's top, not ours.
    monkeypatch.setattr(recipe, "_git", lambda *args: str(tmp_path) if args[0] == "rev-parse" else "0123456789ab")
    assert fresh_versions()["git_commit"] is None
    monkeypatch.setattr(
        recipe, "_git", lambda *args: str(recipe.CONF_DIR.parent) if args[0] == "rev-parse" else "c0ffee"
    )
    recipe.versions.cache_clear()
    assert fresh_versions()["git_commit"] == "c0ffee"
