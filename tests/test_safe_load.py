"""Checkpoints from anyone: never unpickled into code, a damaged or hostile safetensors file one line, and their
network shape bounded before it is built."""

from __future__ import annotations

import json
import math

import pytest
import torch

from vitladder.analysis.checkpoint import load_model
from vitladder.atomic import save_safetensors
from vitladder.errors import CheckpointError
from vitladder.model import ViTConfig, build_vit, vit_config_from_dict
from vitladder.safe_load import load_checkpoint_file


def test_the_payload_is_live_and_refused_here(tmp_path, payload_checkpoint):
    marker = tmp_path / "payload-ran"
    ckpt = payload_checkpoint(tmp_path / "model.pt", marker, {"format": "vitladder-model/1"})
    torch.load(ckpt, weights_only=False)  # what this project must never do: the payload runs
    assert marker.exists()
    marker.unlink()
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint_file(ckpt, "give another file")
    message = str(refused.value)
    assert not marker.exists() and "\n" not in message
    assert message.startswith(f"{ckpt}: refused") and message.endswith("give another file")


def own_model(config: ViTConfig) -> dict:
    """A model.pt's content as train_rung wrote it before the normalisation was added to it."""
    weights = {"vit_config": config.to_dict(), "state_dict": build_vit(config).state_dict()}
    return {"format": "vitladder-model/1", **weights, "classes": ["a"] * 10, "rung": "patch4", "ladder": "smoke"}


def test_the_projects_own_model_loads_weights_only(tmp_path):
    config = ViTConfig(embed_dim=48)
    torch.save(own_model(config), tmp_path / "model.pt")
    model, meta = load_model(tmp_path / "model.pt")
    assert meta.vit_config == config and meta.rung == "patch4"


def by_hand(header: dict, data: bytes = b"") -> bytes:
    """A safetensors file written by hand: its JSON header's length (8 bytes, little-endian), the header, the data."""
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


OWN = {"format": "vitladder-model/1", "vit_config": ViTConfig(embed_dim=48).to_dict(), "rung": "patch4"}


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "not a readable checkpoint"),
        (b"\xff" * 8 + b"{}", "not a readable checkpoint"),  # a header of 16 EiB
        (by_hand({})[:8] + b"{not json", "not a readable checkpoint"),
        (by_hand({"w": {"dtype": "F32", "shape": [10**9], "data_offsets": [0, 4 * 10**9]}}), "not a readable"),
        (by_hand({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "not a readable"),
        (by_hand({"__metadata__": {"format": "{"}}), "not a readable checkpoint"),  # a value that is no JSON
        (by_hand({"__metadata__": {"format": 1}}), "not a readable checkpoint"),  # metadata that is no strings
        (by_hand({"__metadata__": {k: json.dumps(v) for k, v in OWN.items()}}), "does not hold this project's ViT"),
        (by_hand({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "no vitladder-model/1"),
    ],
)
def test_a_damaged_or_hostile_safetensors_file_is_one_line(tmp_path, content, needle):
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(CheckpointError) as error:
        load_model(tmp_path / "model.safetensors")
    assert str(error.value).startswith(f"{tmp_path / 'model.safetensors'}: ") and "\n" not in str(error.value)
    assert needle in str(error.value), str(error.value)


def test_a_safetensors_models_network_shape_is_bounded_before_it_is_built(tmp_path):
    own = build_vit(ViTConfig(embed_dim=48)).state_dict()
    save_safetensors(own, {**OWN, "vit_config": {**OWN["vit_config"], "depth": 10**6}}, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"not a model this project can load \(depth=1000000 is outside"):
        load_model(tmp_path / "model.safetensors")
    save_safetensors(own, OWN, tmp_path / "model.safetensors")
    assert load_model(tmp_path / "model.safetensors")[1].vit_config == ViTConfig(embed_dim=48)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"depth": 10**6}, "depth=1000000 is outside [1, 64]"),
        ({"embed_dim": 4092, "num_heads": 6, "depth": 64}, "parameters, more than 1,000,000,000"),
        ({"img_size": 1024, "patch_size": 1}, "patches per image, more than 4096"),
        ({"num_heads": 7}, "num_heads 7 does not divide embed_dim 48"),
        ({"patch_size": 5}, "patch_size 5 does not divide the 32px image"),
        ({"num_classes": 0}, "num_classes=0 is outside"),
        ({"mlp_ratio": math.nan}, "mlp_ratio=nan is not a number"),
        ({"mlp_ratio": 1e9}, "mlp_ratio=1000000000.0 is outside"),
        ({"drop_path_rate": -1.0}, "drop_path_rate=-1.0 is outside"),
        ({"patch_size": "4"}, "patch_size='4' is not an integer"),
        ({"depth": True}, "depth=True is not an integer"),
        ({"depth": 7.0}, "depth=7.0 is not an integer"),
        ({"evil": 1}, "unknown keys ['evil']"),
    ],
)
def test_a_checkpoints_network_shape_is_bounded_before_it_is_built(tmp_path, change, needle):
    vit_config = {**ViTConfig(embed_dim=48).to_dict(), **change}
    torch.save({"format": "vitladder-model/1", "vit_config": vit_config, "state_dict": {}}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError) as error:
        load_model(tmp_path / "model.pt")
    assert needle in str(error.value) and "\n" not in str(error.value), str(error.value)
    assert str(error.value).startswith(f"{tmp_path / 'model.pt'}: not a model this project can load")


def test_a_lightning_checkpoints_hyperparameters_are_bounded_too(tmp_path):
    hyper = {"model": {**ViTConfig(embed_dim=48).to_dict(), "embed_dim": 10**9}}
    torch.save({"state_dict": {}, "hyper_parameters": hyper}, tmp_path / "last.ckpt")
    with pytest.raises(CheckpointError, match="embed_dim=1000000000 is outside"):
        load_model(tmp_path / "last.ckpt")


def test_vit_config_from_a_list_or_odd_fields_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not a dict"):
        vit_config_from_dict([4, 384])
    for bad in (
        {"state_dict": [], "format": "vitladder-model/1", "vit_config": ViTConfig(embed_dim=48).to_dict()},
        {
            "state_dict": {},
            "format": "vitladder-model/1",
            "vit_config": ViTConfig(embed_dim=48).to_dict(),
            "classes": [1, 2],
        },
    ):
        torch.save(bad, tmp_path / "odd.pt")
        with pytest.raises(CheckpointError, match="does not hold this project's ViT"):
            load_model(tmp_path / "odd.pt")


def test_a_models_normalisation_is_read_and_an_older_model_reads_as_cifar10s(tmp_path):
    from vitladder.data.sources.cifar10 import STATS as CIFAR10_STATS
    from vitladder.data.stats import ChannelStats

    config = ViTConfig(embed_dim=48)
    saved = own_model(config)
    torch.save(saved, tmp_path / "old.pt")  # written before the statistics travelled with the model
    assert load_model(tmp_path / "old.pt")[1].stats == CIFAR10_STATS
    own = ChannelStats((0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    torch.save({**saved, "normalization": own.to_dict()}, tmp_path / "model.pt")
    assert load_model(tmp_path / "model.pt")[1].stats == own
    hyper = {"model": config.to_dict(), "normalization": own.to_dict()}
    lightning = {"state_dict": {f"model.{k}": v for k, v in saved["state_dict"].items()}, "hyper_parameters": hyper}
    torch.save(lightning, tmp_path / "last.ckpt")
    assert load_model(tmp_path / "last.ckpt")[1].stats == own
    torch.save({**saved, "normalization": {"mean": [0.1, 0.2, 0.3], "std": [0.4, -1.0, 0.6]}}, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError) as error:
        load_model(tmp_path / "bad.pt")
    assert "normalisation std is not 3 finite numbers above 0" in str(error.value) and "\n" not in str(error.value)
