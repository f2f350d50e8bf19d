"""One process per run folder: a second train.py or ladder on a locked rung stops with one line and
touches nothing; the lock of a killed holder is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from entry_points import load_script
from tiny_data import tiny_data

from vitladder.data.datamodule import ImageDataModule
from vitladder.errors import UserError
from vitladder.pipeline import train_rung
from vitladder.run_folder import RunPaths
from vitladder.training.recipe import LOCK_FILE, RunLocked, holder_pid, run_lock, write_recipe

TINY = [
    "profile=smoke",
    *tiny_data(num_train=300, num_test=50, val_size=50, batch_size=50),
    "analysis.num_images=10",
    "trainer.enable_progress_bar=false",
]
HOLDER = (
    "import sys, time; from pathlib import Path; from vitladder.training.recipe import run_lock\n"
    "with run_lock(Path(sys.argv[1])):\n    print('locked', flush=True); time.sleep(600)"
)


def hold(run_dir: Path, env: dict) -> subprocess.Popen:
    """Another process that takes the rung's lock and keeps it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
        for p in sorted(folder.rglob("*"))
    }


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-2000:]
    return lines[0]


def test_a_second_train_py_on_a_locked_rung_stops_and_a_dead_holders_lock_is_taken_over(repo_root, tmp_path, child_env):
    run_dir = tmp_path / "smoke" / "patch8"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("the holder's config\n")
    (run_dir / "metrics.csv").write_text("epoch,val/acc\n0,0.5\n")
    holder = hold(run_dir, child_env())
    try:
        assert holder_pid(run_dir / LOCK_FILE) == str(holder.pid)
        before = snapshot(run_dir)
        result = subprocess.run(
            [sys.executable, "train.py", "+step=patch8", *TINY, f"output_root={tmp_path}"],
            cwd=repo_root,
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(),
        )
        assert result.returncode == 2
        line = one_line(result.stderr)
        assert f"{run_dir} is in use by another process (pid {holder.pid})" in line, line
        assert snapshot(run_dir) == before, "the second process touched the run folder"  # no W&B run, no CSV
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The kernel released the killed holder's flock: the next process takes the rung over.
    with run_lock(run_dir):
        assert holder_pid(run_dir / LOCK_FILE) == str(os.getpid())


def test_a_ladder_stops_at_a_locked_rung_with_the_same_line(tmp_path, child_env, repo_root, capsys):
    ladder = load_script("ladder")
    holder = hold(tmp_path / "smoke" / "patch8", child_env())
    try:
        with pytest.raises(SystemExit) as exit_info:
            ladder.main([*TINY, f"output_root={tmp_path}"])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"in use by another process (pid {holder.pid})" in err, err
    assert sorted(p.name for p in (tmp_path / "smoke").iterdir()) == ["patch8"], "the ladder went past the rung"


def test_in_process_a_held_lock_is_refused_at_once_whatever_the_rank(tmp_path, child_env, monkeypatch, tiny_cfg):
    cfg = tiny_cfg("patch8", f"output_root={tmp_path}")
    holder = hold(Path(cfg.run_dir), child_env())
    try:
        with pytest.raises(RunLocked, match=f"pid {holder.pid}"):
            train_rung(cfg)
        # The other ranks of a run never take the lock (they write nothing: test_ranks); one that asks is refused.
        monkeypatch.setenv("LOCAL_RANK", "1")
        with pytest.raises(RunLocked), run_lock(Path(cfg.run_dir)):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


QUICK = ("model.depth=1", "profile.epoch_scale=0.01", "analysis.enabled=false")  # if it trained: CPU seconds


def while_loading_data(monkeypatch, other_process) -> None:
    """Runs ``other_process()`` once, as the run sets up its data: after the first look at the run folder and
    before the lock, where another process may finish the rung or replace it."""
    setup, pending = ImageDataModule.setup, [other_process]

    def setup_then_the_other_process(self, stage=None):
        setup(self, stage)
        while pending:
            pending.pop()()

    monkeypatch.setattr(ImageDataModule, "setup", setup_then_the_other_process)


def finish_elsewhere(cfg, summary: dict) -> None:
    """What a process that trained ``cfg``'s rung leaves: its recipe and done.json (no checkpoint is needed)."""
    paths = RunPaths(Path(cfg.run_dir))
    write_recipe(paths, cfg, None)
    paths.done.write_text(json.dumps(summary))


def test_a_rung_another_process_finished_while_this_one_loaded_its_data_is_not_trained_again(tiny_cfg, monkeypatch):
    cfg = tiny_cfg("patch8", *QUICK)
    paths = RunPaths(Path(cfg.run_dir))
    theirs = {"rung": "patch8", "test_acc": 0.25, "by": "the other process"}
    while_loading_data(monkeypatch, lambda: finish_elsewhere(cfg, theirs))
    assert train_rung(cfg) == theirs
    assert json.loads(paths.done.read_text()) == theirs
    assert not paths.last_ckpt.exists() and not paths.metrics_csv.exists() and not paths.model.exists(), "it trained"


def test_a_rung_another_process_replaced_while_this_one_loaded_its_data_stops_with_one_line(tiny_cfg, monkeypatch):
    cfg = tiny_cfg("patch8", *QUICK, "overwrite=true")  # the folder was empty: nothing to set aside, yet
    paths = RunPaths(Path(cfg.run_dir))
    other = tiny_cfg("patch8", *QUICK, "optim.lr=0.5")
    while_loading_data(monkeypatch, lambda: finish_elsewhere(other, {"by": "the other process"}))
    with pytest.raises(UserError) as refused:
        train_rung(cfg)
    assert str(refused.value) == f"{paths.root} changed while this run loaded its data: run the same command again"
    assert json.loads(paths.done.read_text()) == {"by": "the other process"}, "the other process's run is kept"
    assert [p.name for p in paths.root.parent.iterdir()] == ["patch8"], "nothing was set aside"
    assert not paths.last_ckpt.exists() and not paths.metrics_csv.exists()


def test_a_lock_file_that_names_no_pid_reads_unknown(tmp_path):
    lock_file = tmp_path / LOCK_FILE
    assert holder_pid(lock_file) == "unknown"  # gone
    lock_file.write_text("not a pid\n")
    assert holder_pid(lock_file) == "unknown"
    lock_file.unlink()
    lock_file.mkdir()  # unreadable as a file
    assert holder_pid(lock_file) == "unknown"
    (tmp_path / "other").write_text(" 4242\n")
    assert holder_pid(tmp_path / "other") == "4242"
