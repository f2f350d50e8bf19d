"""Bad input on the command line: one clear line naming the input, a non-zero exit, no traceback, no outputs."""

from __future__ import annotations

import re
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


def test_the_check_reads_hydras_flags_and_sweeps_as_hydra_does():
    """check_command_line reads Hydra's flags with a parser of its own, as Hydra's is private (only this test reads
    it): a flag Hydra adds that takes a value would otherwise have its value read as an override."""
    from hydra._internal.utils import get_args_parser

    from vitladder.cli import check_command_line
    from vitladder.errors import UserError

    takes_a_value = re.findall(r"\[(--[\w-]+) [^\]]", " ".join(get_args_parser().format_usage().split()))
    assert {"--cfg", "--package", "--config-dir", "--info"} <= set(takes_a_value)
    for flag in takes_a_value:
        check_command_line([flag, "job", "step=patch8"])
    check_command_line(["-m", "step=patch8", "seed=range(0,2)", "optim.lr=interval(0.1,1)"])  # left to a sweeper
    with pytest.raises(UserError, match="seed=-1 is not valid"):
        check_command_line(["--multirun", "step=patch8", "seed=range(-1,1)"])
    with pytest.raises(UserError, match="seed=-1 is not valid"):  # the last value of a key is the one that runs
        check_command_line(["-m", "step=patch8", "seed=0,1", "seed=-1"])


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
