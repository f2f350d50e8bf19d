"""Loading a model to analyse: a file that is no checkpoint of this project, and a model whose recipe cannot be
found, are each one line saying what to give instead."""

from __future__ import annotations

import pytest
import torch

from vitladder.analysis.checkpoint import LoadedModel, load_model, load_run_config
from vitladder.data.sources.cifar10 import STATS
from vitladder.errors import CheckpointError, UserError
from vitladder.model import ViTConfig
from vitladder.run_folder import RunPaths


def loaded(tmp_path, run_dir=None, rung=None) -> LoadedModel:
    return LoadedModel(tmp_path / "model.safetensors", ViTConfig(embed_dim=48), run_dir, rung, stats=STATS)


def test_a_file_that_holds_no_dict_is_not_a_checkpoint_of_this_project(tmp_path):
    torch.save([torch.zeros(3)], tmp_path / "list.pt")  # loads weights-only, but as a list
    with pytest.raises(CheckpointError) as error:
        load_model(tmp_path / "list.pt")
    assert str(error.value) == f"{tmp_path / 'list.pt'}: not a checkpoint this project wrote (a list, not a dict)"


def test_a_model_outside_a_run_folder_that_names_no_rung_asks_for_the_run_folder(tmp_path):
    with pytest.raises(UserError) as error:
        load_run_config(loaded(tmp_path))
    message = str(error.value)
    assert message == (
        f"{tmp_path / 'model.safetensors'} sits in no run folder (no config.yaml) and names no rung: pass a run folder"
    )


def test_a_malformed_override_of_a_run_folders_config_is_one_line(tmp_path):
    RunPaths(tmp_path).config.write_text("optim:\n  lr: 0.001\n")
    meta = loaded(tmp_path, run_dir=tmp_path)
    assert load_run_config(meta, ["+optim.lr=0.5"]).optim.lr == 0.5  # a good one is merged, `+` or not
    with pytest.raises(UserError) as error:
        load_run_config(meta, ["optim.lr=[1"])
    message = str(error.value)
    assert message.startswith("bad override in ['optim.lr=[1']: ") and "\n" not in message, message
