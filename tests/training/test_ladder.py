"""The ladder runner: data and seed arguments, the plan, and the smoke ladder end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from entry_points import load_script
from omegaconf import OmegaConf

from vitladder.config import rung_names
from vitladder.errors import UserError
from vitladder.training.ladder import PlannedRun, format_seconds, plan_ladder, run_ladder


def test_data_argument_picks_a_source_or_a_folder():
    data_overrides = load_script("ladder").data_overrides
    assert data_overrides("") == []
    assert data_overrides("synthetic") == ["data=synthetic"]
    assert data_overrides("../x/cifar10-jpeg.tar.xz") == ["data=imagefolder", "data.root=../x/cifar10-jpeg.tar.xz"]


def test_seeds_parse_or_fail_clearly():
    parse_seeds = load_script("ladder").parse_seeds
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds("") == [0]
    with pytest.raises(UserError, match="SEEDS"):
        parse_seeds("0,one")


def test_plan_covers_every_rung_per_seed_in_order():
    runs = plan_ladder([0, 1], ["profile=smoke"])
    assert [(r.rung, r.seed) for r in runs] == [(rung, s) for s in (0, 1) for rung in rung_names()]
    assert str(runs[0].run_dir) == "outputs/smoke/patch8" and str(runs[8].run_dir) == "outputs/smoke/patch8-seed1"
    assert runs[9].overrides == ["step=augment", "profile=smoke", "seed=1"]  # kept in the run folder
    for step in ("+step=patch8", "step=patch8"):
        with pytest.raises(UserError, match=r"train.py step=<rung>"):
            plan_ladder([0], ["profile=smoke", step])


def finish(run: PlannedRun) -> None:
    """A finished run folder as train_rung leaves it: the resolved config.yaml, then done.json."""
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.cfg, resolve=True))
    (run.run_dir / "done.json").write_text(json.dumps({"rung": run.rung, "test_acc": 0.5, "seconds": 1}))


def test_runner_skips_finished_runs_and_reports_an_eta(tmp_path):
    runs = plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}"])
    finish(runs[0])
    trained, lines = [], []

    def train(cfg, overrides):
        assert overrides[0] == f"step={cfg.rung}"
        trained.append(cfg.rung)
        summary = {"rung": cfg.rung, "test_acc": 0.5, "seconds": 1.0}
        (tmp_path / "smoke" / cfg.rung).mkdir(parents=True, exist_ok=True)
        (tmp_path / "smoke" / cfg.rung / "done.json").write_text(json.dumps(summary))
        return summary

    summaries = run_ladder(runs, train, lambda cfgs: [10.0] * len(cfgs), log=lines.append)
    assert trained == list(rung_names()[1:]) and len(summaries) == 8
    assert lines[0] == "1 of 8 runs already finished: skipping them"
    assert lines[1] == "estimated time for 7 runs on this machine: 1m10s"
    assert "ladder ETA" in lines[3]


def test_a_changed_recipe_stops_the_ladder_before_it_trains_anything(tmp_path):
    finish(plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}"])[2])  # patch4, finished
    changed = plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}", "optim.lr=0.5"])

    def train(cfg, overrides):
        raise AssertionError("nothing may train")

    with pytest.raises(UserError) as refused:
        run_ladder(changed, train, lambda cfgs: [1.0] * len(cfgs), log=lambda line: None)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'smoke' / 'patch4'} holds a finished run of another recipe")
    assert "optim.lr 0.002 → 0.5" in message and "ladder=NAME" in message and "LADDER=NAME" in message
    assert "overwrite=true" in message and "patch4.replaced-<time>/" in message


def test_overwrite_retrains_a_changed_rung_and_skips_the_rest(tmp_path):
    base = ["profile=smoke", f"output_root={tmp_path}"]
    for run in plan_ladder([0], base):
        finish(run)  # the whole ladder, finished
    changed = plan_ladder([0], [*base, "optim.lr=0.5", "overwrite=true"])
    trained = []
    run_ladder(
        changed,
        lambda cfg, overrides: trained.append(cfg.rung) or {"test_acc": 0.5, "seconds": 1.0},
        lambda cfgs: [1.0] * len(cfgs),
        log=lambda line: None,
    )
    assert trained == list(rung_names()), "every rung's recipe changed: every rung trains again"

    trained.clear()
    same = plan_ladder([0], [*base, "trainer.enable_progress_bar=false", "wandb.mode=disabled", "overwrite=true"])
    run_ladder(
        same, lambda cfg, overrides: trained.append(cfg.rung), lambda cfgs: [1.0] * len(cfgs), log=lambda line: None
    )
    assert trained == [], "keys outside the recipe change nothing: finished rungs are skipped, even with overwrite"


def test_a_ladder_estimated_beyond_a_day_stops_before_training(tmp_path):
    runs = plan_ladder([0], [f"output_root={tmp_path}"])
    trained = []

    def train(cfg, overrides=None):
        trained.append(cfg.rung)
        summary = {"rung": cfg.rung, "test_acc": 0.5, "seconds": 1.0}
        Path(cfg.run_dir).mkdir(parents=True)
        (Path(cfg.run_dir) / "done.json").write_text(json.dumps(summary))
        return summary

    def estimate(cfgs):  # the full recipe on a CPU: ~140 h a rung
        return [500_000.0] * len(cfgs)

    with pytest.raises(UserError) as info:
        run_ladder(runs, train, estimate, log=lambda line: None)
    message = str(info.value)
    assert "\n" not in message and trained == []
    assert message.startswith("estimated time for 8 runs on this machine: 1111h06m")
    for way_on in ("meant for a GPU", "PROFILE=smoke", "trainer.accelerator=", "CONFIRM_LONG=1", "--yes"):
        assert way_on in message
    # Within a day, or confirmed, it trains.
    run_ladder(runs[:1], train, lambda cfgs: [23 * 3600.0], log=lambda line: None)
    run_ladder(runs[1:2], train, estimate, log=lambda line: None, max_seconds=None)
    assert trained == list(rung_names()[:2])


def test_the_ladder_script_stops_with_one_line_unless_confirmed(repo_root, tmp_path, monkeypatch, capsys):
    from vitladder.devtools import estimate

    monkeypatch.setattr(estimate, "estimate_ladder", lambda cfgs: [500_000.0] * len(cfgs))
    script = load_script("ladder")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--data", "synthetic", f"output_root={tmp_path}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: estimated time for 8 runs") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == [], "nothing written"

    import vitladder.pipeline as pipeline

    trained = []

    def train_one(cfg, overrides=None):
        trained.append(cfg.rung)
        raise RuntimeError("stop after the first rung")

    monkeypatch.setattr(pipeline, "train_rung", train_one)
    with pytest.raises(RuntimeError, match="stop after the first rung"):
        script.main(["--yes", "--data", "synthetic", f"output_root={tmp_path}"])
    assert trained == ["patch8"]


@pytest.mark.parametrize(
    "placement, refused",
    [
        (
            ["trainer.devices=6", "trainer.strategy=ddp", "data.batch_size=510"],
            "mixup_cutmix (seed 0): data.batch_size=510 gives 85 images per device on 6 devices, and MixUp/CutMix "
            "needs an even batch: choose a multiple of 12, e.g. data.batch_size=504",
        ),
        (
            ["trainer.devices=3", "trainer.strategy=ddp", "data.batch_size=64"],
            "patch8 (seed 0): data.batch_size=64 is the global batch and must split evenly over 3 devices",
        ),
        (["trainer.devices=2", "trainer.strategy=ddp_spawn"], "patch8 (seed 0): trainer.strategy=ddp_spawn trains in"),
    ],
)
def test_a_run_its_devices_cannot_train_stops_the_ladder_before_any_rung_trains(
    tmp_path, monkeypatch, capsys, placement, refused
):
    # Checked per rung in train_rung, an odd batch under MixUp/CutMix stopped the ladder after five rungs had trained.
    import vitladder.pipeline as pipeline
    from vitladder.devtools import estimate

    monkeypatch.setattr(estimate, "estimate_ladder", lambda cfgs: pytest.fail("refused before the estimate trains"))
    monkeypatch.setattr(pipeline, "train_rung", lambda cfg, overrides=None: pytest.fail("nothing may train"))
    with pytest.raises(SystemExit) as exit_info:
        load_script("ladder").main(["profile=smoke", "trainer.accelerator=cpu", *placement, f"output_root={tmp_path}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: {refused}") and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_a_ladder_without_cifar10_or_a_network_says_in_one_line_how_to_get_it(tmp_path, monkeypatch, capsys):
    # make ladder's default data (data=cifar10, as PROFILE=laptop's) where the download fails: no network here.
    import urllib.error
    import urllib.request

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root = tmp_path / "empty" / "data"
    with pytest.raises(SystemExit) as exit_info:
        load_script("ladder").main(["profile=smoke", "data=cifar10", f"data.root={root}", f"output_root={tmp_path}"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: could not download CIFAR-10 into {root}"), err
    assert err.count("\n") == 1, err
    for way in ("with a network", "train/<class>/ and test/<class>/", "DATA=", "data=imagefolder data.root="):
        assert way in err, way
    assert list(tmp_path.iterdir()) == [], "nothing written: neither the data folder nor a run folder"


def test_the_ladder_on_another_rank_trains_what_rank_0_trains_and_nothing_else(tmp_path, monkeypatch, capsys):
    """Lightning's DDP launcher runs scripts/ladder.py again for every other rank: no estimate, log or report there."""
    import vitladder.pipeline as pipeline
    from vitladder.devtools import estimate

    runs = plan_ladder([0], ["profile=smoke", f"output_root={tmp_path}"])
    finish(runs[0])
    monkeypatch.setattr(estimate, "estimate_ladder", lambda cfgs: pytest.fail("only rank 0 estimates"))
    trained = []
    monkeypatch.setattr(pipeline, "train_rung", lambda cfg, overrides: trained.append(overrides) or {})
    monkeypatch.setenv("LOCAL_RANK", "1")
    load_script("ladder").main(["profile=smoke", f"output_root={tmp_path}"])
    assert trained == [run.overrides for run in runs[1:]], "rank 0's runs, in its order"
    assert capsys.readouterr().out == "" and [p.name for p in (tmp_path / "smoke").iterdir()] == ["patch8"]


@pytest.mark.parametrize("confirm, passed", [("", False), ("1", True), ("0", False)])
def test_make_ladder_passes_the_confirmation(repo_root, confirm, passed):
    dry_run = subprocess.run(
        ["make", "-n", "ladder", f"CONFIRM_LONG={confirm}"], cwd=repo_root, capture_output=True, text=True, check=True
    ).stdout
    command = next(line for line in dry_run.splitlines() if "scripts/ladder.py" in line)
    assert ("--yes" in command.split()) == passed


def test_format_seconds():
    assert format_seconds(59) == "0m59s" and format_seconds(3725) == "1h02m"


# The smoke profile's recipe and epochs on a quarter of its images, from a synthetic set generated at that size
# (not 12,000 images per rung): every rung still trains, tests and analyses its 100 images end to end.
SMALLER_SMOKE_DATA = [
    "data.num_train=1200",
    "data.num_test=200",
    "data.val_size=200",
    "data.train_subset=1000",
    "data.test_subset=200",
]


@pytest.mark.slow
def test_smoke_ladder_trains_every_rung(repo_root, tmp_path, child_env):
    started = time.time()
    result = subprocess.run(
        [
            sys.executable,
            "scripts/ladder.py",
            "profile=smoke",
            f"output_root={tmp_path}",
            "trainer.enable_progress_bar=false",
            *SMALLER_SMOKE_DATA,
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=1800,
        env=child_env(),
    )
    elapsed = time.time() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "estimated time for 8 runs on this machine" in result.stdout
    for rung in rung_names():
        run_dir = tmp_path / "smoke" / rung
        summary = json.loads((run_dir / "done.json").read_text())
        assert summary["rung"] == rung and summary["epochs"] == (2 if rung == "epochs200" else 1)
        assert (run_dir / "checkpoints" / "model.safetensors").is_file() and (run_dir / "metrics.csv").is_file()
    print(f"smoke ladder: {elapsed:.0f} s")
