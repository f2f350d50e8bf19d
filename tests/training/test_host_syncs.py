"""No evaluation step, and no training step of the module, makes the host wait for the device: counted on the CPU.

A CPU has no host sync to catch (torch.cuda.set_sync_debug_mode is CUDA's), so the steps run under a dispatch mode
that records the operations which on CUDA read a value back to the host or send one from it. TorchDispatchMode is
torch's mechanism for intercepting every operator (torch.utils._python_dispatch, private: the counter checks
itself on known syncs below, so a change in it fails here rather than counting nothing)."""

from __future__ import annotations

from collections import Counter

import lightning as L
import pytest
import torch
from run_helpers import module_for, set_up_data
from torch.utils._python_dispatch import TorchDispatchMode

# The operators that make the host wait on CUDA: a value read back (item(), bool(), int(), float(), formatting,
# torch.equal; under inference mode bool() and item() reach the dispatcher undecomposed); a tensor made from
# Python data (torch.tensor, as_tensor, a Python weight), copied to the device; and outputs sized by the data
# (boolean masks, unique, bincount).
SYNCS = {
    "aten._local_scalar_dense",
    "aten.is_nonzero",
    "aten.item",
    "aten.equal",
    "aten.lift_fresh",
    "aten.nonzero",
    "aten.masked_select",
    "aten._unique2",
    "aten.unique_dim",
    "aten.unique_consecutive",
    "aten.bincount",
}
COPIES = ("cpu", "tolist", "numpy")  # Tensor methods that copy to the host without an operator on the CPU


class HostSyncs(TorchDispatchMode):
    """While entered, counts every operation that is a host sync on CUDA, by name (``self.seen``)."""

    def __init__(self, monkeypatch) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()
        self.active = False
        for name in COPIES:
            method = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counting(name, method))

    def _counting(self, name, method):
        def counted(tensor, *args, **kwargs):
            if self.active:
                self.seen[f"Tensor.{name}"] += 1
            return method(tensor, *args, **kwargs)

        return counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        boolean_index = name == "aten.index" and any(i is not None and i.dtype == torch.bool for i in args[1])
        if name in SYNCS or boolean_index:
            self.seen[name] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self.active = True
        return super().__enter__()

    def __exit__(self, *exc):
        self.active = False
        return super().__exit__(*exc)


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


@pytest.mark.parametrize("rung", ["patch8", "stochastic_depth"])
def test_the_modules_training_step_makes_no_host_sync(tiny_cfg, monkeypatch, rung):
    # The step itself: augmentation, MixUp/CutMix, drop path, the loss and the metrics' updates.
    module = module_for(tiny_cfg(rung, "model.depth=1")).train()
    images, labels = next(iter(set_up_data(tiny_cfg(rung)).train_dataloader()))
    syncs = HostSyncs(monkeypatch)
    with syncs:
        module.training_step((images, labels), 0)
    assert syncs.seen == {}
