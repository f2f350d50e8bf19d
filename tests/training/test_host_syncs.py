"""No evaluation step makes the host wait for the device, counted on the CPU (tests/host_syncs.py); the training step
is tests/training/test_scale.py's."""

from __future__ import annotations

import lightning as L
import torch
from host_syncs import HostSyncs
from run_helpers import module_for, set_up_data


class SyncsPerBatch(L.Callback):
    """The host syncs of every validation and test batch, from the batch's start to its end (step and logging)."""

    def __init__(self, syncs: HostSyncs) -> None:
        self.syncs, self.per_batch = syncs, []

    def _start(self, *args) -> None:
        self.syncs.seen.clear()
        self.syncs.__enter__()

    def _end(self, *args) -> None:
        self.syncs.__exit__(None, None, None)
        self.per_batch.append(dict(self.syncs.seen))

    on_validation_batch_start = on_test_batch_start = _start
    on_validation_batch_end = on_test_batch_end = _end


def test_the_counter_sees_the_syncs_it_looks_for(monkeypatch):
    syncs = HostSyncs(monkeypatch)
    x = torch.arange(4.0)
    with syncs:
        x.sum().item(), bool(x[0] > 0), torch.as_tensor(3.0), x[x > 1], x.tolist(), x.cpu()
        with torch.inference_mode():  # as Lightning evaluates
            bool(x.isnan().any()), torch.equal(x, x)
    assert syncs.seen == {
        "aten._local_scalar_dense": 2,
        "aten.is_nonzero": 1,
        "aten.equal": 1,
        "aten.lift_fresh": 1,
        "aten.index": 1,
        "Tensor.tolist": 1,
        "Tensor.cpu": 1,
    }
    x.sum().item()  # outside: not counted
    assert sum(syncs.seen.values()) == 8


def test_an_evaluation_step_makes_no_host_sync(tiny_cfg, monkeypatch):
    # 200 validation and 200 test images in batches of 64: three full batches and a partial one each.
    cfg = tiny_cfg("mixup_cutmix", "model.depth=1")
    syncs = HostSyncs(monkeypatch)
    recorder = SyncsPerBatch(syncs)
    datamodule = set_up_data(cfg)
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[recorder]
    )
    module = module_for(cfg)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    trainer.test(module, datamodule=datamodule, verbose=False)
    assert recorder.per_batch == [{}] * 8  # MeanMetric's NaN checks and a Python weight were 3 per step
