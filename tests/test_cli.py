"""Bad input on the command line: one clear line naming the input, a non-zero exit, no traceback, no outputs."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from tiny_data import tiny_data

TINY = [
    "profile=smoke",
    *tiny_data(num_train=300, num_test=50, val_size=50, batch_size=50),
    "analysis.num_images=10",
    "trainer.enable_progress_bar=false",
]


@pytest.fixture
def train(repo_root, child_env):
    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "train.py", *args],
            cwd=repo_root,
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(**(env or {})),
        )

    return run


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr[-2000:]
    for needle in needles:
        assert needle in last, last
    return last


@pytest.mark.parametrize(
    "override, needles",
    [
        ("trainer.max_epochs=abc", ("trainer.max_epochs='abc' is not valid", "takes an integer")),
        ("data.horizontal_flip=maybe", ("data.horizontal_flip", "true or false")),
        ("trainer.max_epoch=3", ("trainer.max_epoch: no such key; did you mean trainer.max_epochs?",)),
        ("+optim.lrr=1", ("optim.lrr: no such key; did you mean optim.lr?",)),  # with the +: still the schema's
        ("data=imagenet", ("data=imagenet: no such choice", "data/imagenet", "cifar10, imagefolder, synthetic")),
        ("data.batch_size=[", ("malformed override 'data.batch_size=['", "key=value")),
        # Values in range, checked before any folder exists (seed=-1 used to create <rung>-seed-1/ first).
        ("data.batch_size=0", ("data.batch_size=0 is not valid", "at least 1")),
        ("data.val_size=-5", ("data.val_size=-5 is not valid", "at least 0")),
        ("seed=-1", ("seed=-1 is not valid", "between 0 and")),
        ("wandb.mode=bogus", ("wandb.mode='bogus' is not valid", "auto, online, offline, disabled")),
        ("ladder=../../x", ("ladder='../../x' is not valid", "plain folder name")),
    ],
)
def test_malformed_overrides(train, tmp_path, override, needles):
    result = train("step=patch8", override, f"output_root={tmp_path}")
    assert_one_line_error(result, *needles)
    assert len(result.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir()), "nothing written"


def test_a_sweep_is_checked_job_by_job_before_any_job_runs(train, tmp_path):
    result = train("-m", "step=patch8,augment", "seed=0,-1", f"output_root={tmp_path}")
    assert_one_line_error(result, "seed=-1 is not valid")
    assert not any(tmp_path.iterdir()), "not even the seed-0 jobs ran"


@pytest.fixture
def train_here(repo_root, monkeypatch):
    """train.py run in this process with its training left out: returns the configs its jobs would have trained
    and how often the project composed a job's config (config.compose_unchecked) and validated one."""
    import runpy
    import types

    from vitladder import cli, config

    trained, calls = [], {"compose": 0, "validate": 0}

    def counted(name, function):
        def count(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return count

    monkeypatch.setattr(config, "compose_unchecked", counted("compose", config.compose_unchecked))
    monkeypatch.setattr(config, "validate", counted("validate", config.validate))
    monkeypatch.setattr(cli, "validate", config.validate)
    monkeypatch.setattr(cli, "CHECKED", set())  # the jobs a sweep of this process checked: none yet
    stub = types.SimpleNamespace(train_rung=lambda cfg, overrides: trained.append(cfg) or {"test_acc": 0.5})
    monkeypatch.setitem(sys.modules, "vitladder.pipeline", stub)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "")  # restored after the test: run_app sets it

    def run(*args: str) -> tuple[list, dict]:
        monkeypatch.setattr(sys, "argv", ["train.py", *args])
        loggers = [logging.getLogger(), logging.getLogger("hydra")]  # conf/hydra/hydra_logging sets them up
        saved = [(logger, logger.level, logger.handlers[:], logger.propagate) for logger in loggers]
        try:
            runpy.run_path(str(repo_root / "train.py"), run_name="__main__")
        finally:
            for logger, level, handlers, propagate in saved:  # as they were for the tests after this one
                logger.handlers[:], logger.propagate = handlers, propagate
                logger.setLevel(level)
        return trained, calls

    return run


def test_a_run_is_composed_by_hydra_alone_and_validated_once(train_here, tmp_path):
    trained, calls = train_here("+step=augment", "seed=3", f"output_root={tmp_path}")
    assert [(cfg.rung, cfg.seed) for cfg in trained] == [("augment", 3)]
    assert calls == {"compose": 0, "validate": 1}, "Hydra composed it; the job validated it"


def test_a_sweeps_jobs_are_composed_and_validated_once_each_before_the_first_runs(train_here, tmp_path):
    trained, calls = train_here("-m", "step=patch8,augment", "seed=1", f"output_root={tmp_path}")
    assert [(cfg.rung, cfg.seed) for cfg in trained] == [("patch8", 1), ("augment", 1)]
    assert calls == {"compose": 2, "validate": 2}, "the check composed and validated each job; no job again"


def test_a_sweep_of_two_recipes_into_one_run_folder_is_refused_before_any_job_runs(train_here, tmp_path):
    # The way the refusal suggests: each job its own ladder, named after its value (interpolated per job).
    ladders = tmp_path / "ladders"
    trained, calls = train_here(
        "-m", "step=patch8", "optim.lr=1e-3,2e-3", "ladder=lr${optim.lr}", f"output_root={ladders}"
    )
    assert [(cfg.ladder, cfg.optim.lr) for cfg in trained] == [("lr0.001", 1e-3), ("lr0.002", 2e-3)]
    assert calls == {"compose": 2, "validate": 2}, "the jobs' overrides as typed: each checked once, before the first"
    with pytest.raises(SystemExit) as exit_info:
        train_here("-m", "step=patch8", "optim.lr=1e-3,2e-3", f"output_root={tmp_path / 'one'}")
    assert exit_info.value.code == 2 and len(trained) == 2 and not (tmp_path / "one").exists()
    train_here("-m", "step=patch8", "wandb.mode=offline,disabled", f"output_root={tmp_path / 'two'}")
    assert len(trained) == 4, "jobs that differ outside the recipe share a run folder: the second keeps the first's"


def test_a_job_the_sweep_check_did_not_see_validates_itself(train_here, tmp_path, monkeypatch):
    # A sweep only a sweeper plugin expands, or a job that another process runs (SLURM's): checked in the job.
    from vitladder import cli

    monkeypatch.setattr(cli, "sweep_jobs", lambda overrides: [])
    trained, calls = train_here("-m", "step=patch8,augment", f"output_root={tmp_path}")
    assert len(trained) == 2 and calls == {"compose": 0, "validate": 2}
    with pytest.raises(SystemExit) as exit_info:
        train_here("-m", "step=patch8", "seed=-1", f"output_root={tmp_path}")
    assert exit_info.value.code == 2 and len(trained) == 2


def test_the_sweep_check_stops_at_the_first_job_in_error(monkeypatch, capsys):
    from omegaconf import OmegaConf

    from vitladder import cli

    monkeypatch.setattr(cli, "CHECKED", set())

    def check(*overrides: str) -> None:  # what Hydra calls before a sweep, with the sweep's overrides
        cli.CheckSweep().on_multirun_start(OmegaConf.create({"hydra": {"overrides": {"task": list(overrides)}}}))

    check("step=warmup,patch8", "trainer.gradient_clip_val=1")
    assert cli.CHECKED == {
        ("step=warmup", "trainer.gradient_clip_val=1"),
        ("step=patch8", "trainer.gradient_clip_val=1"),
    }
    for overrides, message in [
        (["step=patch8,patch99"], "error: unknown rung 'patch99': choose one of patch8, augment"),
        (["step=patch8,augment", "seed=0,-1"], "error: seed=-1 is not valid"),
        (["seed=0,1"], "error: choose a rung with step=<rung>"),
        (["step=patch8", "seed=0,1", "seed=-1"], "error: seed=-1 is not valid"),  # a key's last value is the one run
        (["step=patch8", "optim.lrr=1,2"], "error: optim.lrr: no such key; did you mean optim.lr?"),
        (
            ["step=patch8", "optim.lr=1e-3,2e-3", "seed=0,1"],
            "error: jobs #0 and #2 of this sweep would both train into outputs/full/patch8, with different recipes "
            "(optim.lr 0.001 → 0.002): give each its own ladder, e.g. 'ladder=full-lr${optim.lr}'\n",
        ),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            check(*overrides)
        assert exit_info.value.code == 2 and capsys.readouterr().err.startswith(message), overrides


def test_the_check_expands_a_sweep_as_hydras_basic_sweeper_does():
    from vitladder.cli import sweep_jobs

    assert sweep_jobs(["step=patch8,augment", "seed=range(0,2)"]) == [
        ["step=patch8", "seed=0"],
        ["step=patch8", "seed=1"],
        ["step=augment", "seed=0"],
        ["step=augment", "seed=1"],
    ]
    assert sweep_jobs(["seed=0,1", "step=patch8", "seed=5"]) == [["seed=5", "step=patch8"]]  # the last value wins
    assert sweep_jobs(["step=patch8", "optim.lr=interval(0.1,1)"]) == []  # a sweeper plugin's: each job checks itself


def test_missing_data_folder(train, tmp_path):
    missing = tmp_path / "no-such-folder"
    result = train("step=patch8", "data=imagefolder", f"data.root={missing}", f"output_root={tmp_path / 'out'}")
    assert_one_line_error(result, str(missing))
    assert not (tmp_path / "out").exists()


def test_corrupted_archive(train, tmp_path):
    archive = tmp_path / "cifar.tar.xz"
    archive.write_bytes(b"\xfd7zXZ\x00 this is not really an archive" * 10)
    result = train("step=patch8", "data=imagefolder", f"data.root={archive}", f"output_root={tmp_path / 'out'}")
    assert_one_line_error(result, str(archive))


def test_unwritable_output_folder(train, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = train("+step=patch8", *TINY, f"output_root={blocker / 'outputs'}")
    assert_one_line_error(result, "cannot write to the output folder", "output_root=")


def test_nan_loss_names_the_epoch(train, tmp_path):
    result = train("step=patch8", *TINY, "optim.lr=1e30", f"output_root={tmp_path}")
    assert_one_line_error(result, "epoch 0", "optim.lr")
    assert not (tmp_path / "smoke" / "patch8" / "done.json").exists()


def test_training_goes_on_offline_when_online_is_asked_without_a_network(train, tmp_path):
    result = train(
        "+step=patch8",
        *TINY,
        f"output_root={tmp_path}",
        "wandb.mode=online",
        env={"WANDB_MODE": "", "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_API_KEY": "x" * 40},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "logging offline instead" in result.stderr
    run_dir = tmp_path / "smoke" / "patch8"
    assert (run_dir / "done.json").is_file() and list((run_dir / "wandb").glob("offline-run-*"))
    # Lightning's lines once: Hydra's logging config no longer repeats them through the root logger.
    assert (result.stdout + result.stderr).count("`Trainer.fit` stopped") == 1, result.stdout
