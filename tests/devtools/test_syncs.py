"""The host-sync counter counts every call that hands a tensor's value to the host, only while on, and leaves
torch.Tensor as it found it; in the project's loop it sees a sync planted in a training or evaluation step."""

from __future__ import annotations

import pytest
import torch

from vitladder.devtools.syncs import SYNCING_METHODS, HostSyncs


def test_every_call_that_reads_a_value_on_the_host_is_counted_while_on():
    x = torch.arange(4.0)
    before = {name: torch.Tensor.__dict__.get(name) for name in SYNCING_METHODS}
    with HostSyncs(cuda=False) as syncs:
        x[0].item()  # off: not counted
        syncs.on = True
        x.sum().item()
        bool(x.sum() > 0)
        if x[1] > 0:  # __bool__
            pass
        float(x[2]), int(x[3])
        x[torch.tensor(1) : torch.tensor(3)]  # __index__
        x.tolist(), x.cpu(), x.numpy()
        _ = x * 2 + x.mean()  # stays on the device: no sync
        exempt = torch.tensor(3.0)
        syncs.exempt = {id(exempt)}
        exempt.item()  # a host-side tensor (e.g. AdamW's step count): not counted
        syncs.on = False
        x[0].item()
    assert dict(syncs.calls) == {
        "item": 1,
        "__bool__": 2,
        "__float__": 1,
        "__int__": 1,
        "__index__": 2,
        "tolist": 1,
        "cpu": 1,
        "numpy": 1,
    }
    assert syncs.total == 10 and syncs.cuda is None
    assert {name: torch.Tensor.__dict__.get(name) for name in SYNCING_METHODS} == before


def test_the_methods_are_restored_when_the_block_fails():
    before = {name: torch.Tensor.__dict__.get(name) for name in SYNCING_METHODS}
    with pytest.raises(RuntimeError), HostSyncs(cuda=False):
        raise RuntimeError("a step failed")
    assert {name: torch.Tensor.__dict__.get(name) for name in SYNCING_METHODS} == before
