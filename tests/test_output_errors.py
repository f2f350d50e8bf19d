"""Writing outputs: the umask's mode, the previous version kept when a write fails, and one line that
names the path at the entry points instead of a traceback."""

from __future__ import annotations

import errno
import os
import resource
import stat
import subprocess
import sys

import pytest
import torch

from vitladder.atomic import atomic_path, remove_leftovers, save_safetensors, save_torch, write_text
from vitladder.cli import reports_user_errors
from vitladder.errors import describe_os_error


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_outputs_get_the_umasks_mode(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_text(tmp_path / "a.txt", "a")
        save_torch({"x": torch.zeros(2)}, tmp_path / "b.pt")
        save_safetensors({"x": torch.zeros(2)}, {"rung": "warmup"}, tmp_path / "c.safetensors")
    finally:
        os.umask(previous)
    for name in ("a.txt", "b.pt", "c.safetensors"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask, name


def test_a_failed_write_keeps_the_previous_version_and_names_the_output(tmp_path):
    path = tmp_path / "config.yaml"
    write_text(path, "previous\n")
    with pytest.raises(OSError) as failure:
        with atomic_path(path) as tmp, tmp.open("w") as file:
            file.write("half of the new")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what write() raises on a full disk
    assert failure.value.filename == str(path)
    assert path.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


def test_os_errors_are_one_line_naming_the_path_and_what_to_do(capsys):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/run/last.ckpt")
    assert describe_os_error(full) == (
        "/data/run/last.ckpt: No space left on device; free some disk space or write "
        "elsewhere, then run the same command again (an interrupted rung resumes "
        "from its last checkpoint)"
    )
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/data/run")
    assert describe_os_error(denied).startswith("/data/run: Permission denied; make it writable or write elsewhere")

    def entry_point():
        raise full

    with pytest.raises(SystemExit) as exit_info:
        reports_user_errors(entry_point)()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err == f"error: {describe_os_error(full)}\n"


def test_train_py_on_a_disk_that_fills_up_while_writing_config_yaml(repo_root, tmp_path, child_env):
    # A file-size limit of 200 bytes: the lock's pid fits, config.yaml (about 1 KB) does not (EFBIG,
    # which Python gets as an OSError: it ignores SIGXFSZ), as a full disk would.
    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    result = subprocess.run(
        [
            sys.executable,
            "train.py",
            "+step=patch8",
            "profile=smoke",
            "data=synthetic",
            "data.num_train=300",
            "data.num_test=50",
            "data.val_size=50",
            "data.train_subset=null",
            "data.test_subset=null",
            "data.batch_size=50",
            f"output_root={tmp_path}",
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        preexec_fn=small_disk,
    )
    config = tmp_path / "smoke" / "patch8" / "config.yaml"
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {config}: File too large; free some disk space"), lines
    assert not config.exists() and not list(tmp_path.rglob("*.tmp"))


def test_a_killed_writers_temporary_files_are_removed_and_nothing_else(tmp_path):
    (tmp_path / "analysis").mkdir()
    write_text(tmp_path / "analysis" / "layers.csv", "layer\n")
    left = tmp_path / "analysis" / ".heads.csv.k2j3h4.tmp"  # atomic_path's name for heads.csv
    left.write_text("half a file")  # as a SIGKILL between the write and the rename leaves it
    (tmp_path / "notes.tmp").write_text("not ours: no leading dot")
    assert remove_leftovers(tmp_path) == [left]
    assert not left.exists() and (tmp_path / "notes.tmp").exists() and (tmp_path / "analysis" / "layers.csv").exists()
    assert remove_leftovers(tmp_path) == []
