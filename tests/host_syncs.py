"""Counting host syncs on the CPU, for the tests that keep them out of the training and evaluation steps.

A CPU has no host sync to catch (torch.cuda.set_sync_debug_mode is CUDA's), so ``HostSyncs`` records the operations
that on CUDA read a value back to the host or send one from it. It intercepts every operator with a
TorchDispatchMode (torch.utils._python_dispatch, private: tests/training/test_host_syncs.py checks the counter on
known syncs, so a change in it fails there rather than counting nothing), and patches the Tensor methods that copy
to the host without an operator on the CPU.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The operators that make the host wait on CUDA: a value read back (item(), bool(), int(), float(), formatting,
# torch.equal; under inference mode bool() and item() reach the dispatcher undecomposed); a tensor made from
# Python data (torch.tensor, as_tensor, a Python weight), copied to the device; and outputs sized by the data
# (boolean masks, unique, bincount, nonzero).
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
            monkeypatch.setattr(torch.Tensor, name, self._counting_copy(name, getattr(torch.Tensor, name)))

    def _counting_copy(self, name, method):
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

    def counting(self, function):
        """``function``, counted while it runs."""

        def counted(*args, **kwargs):
            with self:
                return function(*args, **kwargs)

        return counted
