"""The host-sync counter (devtools/syncs.py) counts every operation that makes the host wait on CUDA, inside torch's
functions too, only while on, and leaves torch.Tensor as it found it; on CUDA it leaves out tensors on the host and
adds what CUDA's sync debug mode reports. The bench and the tests that keep syncs out of the training and evaluation
steps count with it (tests/training/test_scale.py, test_host_syncs.py; tests/devtools/test_benchmark.py)."""

from __future__ import annotations

import warnings

import pytest
import torch

from vitladder.devtools.syncs import COPIES, HostSyncs


def methods() -> dict:
    return {name: torch.Tensor.__dict__.get(name) for name in COPIES}


def test_every_operation_that_syncs_on_cuda_is_counted_while_on():
    x = torch.arange(4.0)
    before = methods()
    with HostSyncs() as syncs:
        x[0].item()  # off: not counted
        syncs.on = True
        x.sum().item(), bool(x[0] > 0), float(x[2]), int(x[3])
        x[torch.tensor(1) : torch.tensor(3)]  # two tensors from Python data, each read back as an index
        torch.as_tensor(3.0), x[x > 1], torch.nonzero(x), torch.unique(x), x.tolist(), x.cpu(), x.numpy()
        x[x > 2] = 0.0  # a masked write
        torch.nn.functional.cross_entropy(x[None], torch.tensor([1]))  # a target from Python data; no sync inside
        with torch.inference_mode():  # as Lightning evaluates
            bool(x.isnan().any()), torch.equal(x, x)
        _ = x * 2 + x.mean()  # stays on the device: no sync
        exempt = torch.tensor(3.0)  # a host-side tensor (e.g. AdamW's step count): its reads are not counted
        syncs.exempt = {id(exempt)}
        exempt.item()
        syncs.on = False
        x[0].item()
    assert dict(syncs.seen) == {
        "aten._local_scalar_dense": 6,  # item(), bool(), float(), int(), the two indices
        "aten.is_nonzero": 1,  # bool() under inference mode
        "aten.lift_fresh": 6,  # the two indices, as_tensor, the written 0.0, the target, the exempt tensor's making
        "aten.index": 1,
        "aten.index_put_": 1,
        "aten.nonzero": 1,
        "aten._unique2": 1,
        "aten.equal": 1,
        "Tensor.tolist": 1,
        "Tensor.cpu": 1,
        "Tensor.numpy": 1,
    }
    assert syncs.total == 21 and syncs.cuda is None
    assert methods() == before


def test_counting_a_function_counts_only_while_it_runs_and_nested_counters_both_count():
    x = torch.arange(4.0)
    with HostSyncs() as outer, HostSyncs() as inner:
        step = inner.counting(lambda: x.sum().item())
        x.sum().item()
        step()
        outer.on = True
        step()
    assert dict(inner.seen) == {"aten._local_scalar_dense": 2} and outer.total == 1 and not inner.on


def test_the_methods_are_restored_when_the_block_fails():
    before = methods()
    with pytest.raises(RuntimeError), HostSyncs():
        raise RuntimeError("a step failed")
    assert methods() == before


def test_on_cuda_host_tensors_are_left_out_and_the_sync_debug_mode_is_counted(monkeypatch):
    # CUDA's debug mode warns at every synchronizing call inside torch while set to "warn"; here a fake one.
    modes = []

    def set_sync_debug_mode(mode):
        modes.append(mode)

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_sync_debug_mode)
    x = torch.arange(4.0)  # on the host, as AdamW's step counts and a CPU-drawn permutation are on CUDA too
    with HostSyncs(cuda=True) as syncs:
        syncs.on = True
        x.sum().item(), x.tolist(), x.cpu()
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
        syncs.on = False
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)  # off: not counted
        syncs.on = True
        syncs.on = False
    assert syncs.total == 0 and syncs.cuda == 1 and modes == ["warn", "default"] * 2
