"""Counting host syncs: the points where the host waits for the device, which a training loop should not have.

On CUDA the host runs ahead of the device; an operation that needs a tensor's value on the host waits for the queue
to drain. ``HostSyncs`` counts those operations by what they are, so the count is the same on the CPU, where nothing
waits: the operators that sync on CUDA, seen below autograd and autocast through a TorchDispatchMode (a value read by
the host, a tensor made from Python data, outputs sized by the data), the ``torch.Tensor`` methods that copy to the
host without an operator on the CPU, and on CUDA what ``torch.cuda.set_sync_debug_mode("warn")`` reports (``cuda``),
an operator on a tensor that is on the host anyway not counted there. Tensors in ``exempt`` (by id) live on the host
on CUDA too, such as the step counts of torch's non-fused AdamW, which it reads with ``.item()``.

``torch.utils._python_dispatch`` is private: tests/devtools/test_syncs.py counts known syncs through it, so a change
there fails that test rather than counting nothing.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from functools import wraps
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The operators that make the host wait on CUDA (under inference mode bool() and item() reach the dispatcher
# undecomposed, as is_nonzero and item).
SYNCS = {
    f"aten.{op}"
    for op in "_local_scalar_dense is_nonzero item equal lift_fresh nonzero masked_select _unique2 unique_dim "
    "unique_consecutive bincount".split()
}
MASKED = {"aten.index", "aten.index_put", "aten.index_put_"}  # syncs when an index is a boolean mask
COPIES = ("cpu", "tolist", "numpy")  # Tensor methods that copy to the host without an operator on the CPU


class HostSyncs(TorchDispatchMode):
    """While entered, ``on`` switches counting on and off (or ``counting(function)`` counts while it runs);
    ``seen`` counts by operator or method, ``cuda`` what CUDA's sync debug mode reported (None off CUDA)."""

    def __init__(self, cuda: bool = False) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()
        self.on_cuda = cuda  # the counted steps run on a CUDA GPU
        self.cuda: int | None = 0 if cuda else None
        self.exempt: set[int] = set()
        self._on = False
        self._warnings: list[warnings.WarningMessage] = []
        self._patches = ExitStack()

    @property
    def total(self) -> int:
        return sum(self.seen.values())

    @property
    def on(self) -> bool:
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        if value != self._on and self.on_cuda:
            torch.cuda.set_sync_debug_mode("warn" if value else "default")
            if not value:  # what the debug mode reported while on
                self.cuda += sum("synchronizing" in str(w.message) for w in self._warnings)
            self._warnings.clear()
        self._on = value

    def counting(self, function: Callable) -> Callable:
        """``function``, counted while it runs (inside the entered counter)."""

        @wraps(function)
        def counted(*args, **kwargs):
            was, self.on = self.on, True
            try:
                return function(*args, **kwargs)
            finally:
                self.on = was

        return counted

    def _counts(self, tensor: object) -> bool:
        """Whether an operation on ``tensor`` syncs: a device tensor (every tensor, off CUDA), not exempt."""
        if not isinstance(tensor, torch.Tensor):
            return True
        return id(tensor) not in self.exempt and not (self.on_cuda and tensor.device.type == "cpu")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self._on:
            name = str(func.overloadpacket)
            masked = name in MASKED and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
            if (name in SYNCS or masked) and self._counts(args[0] if args else None):
                self.seen[name] += 1
        return func(*args, **(kwargs or {}))

    def _counting_copy(self, name: str, method: Callable) -> Callable:
        @wraps(method)
        def counted(tensor, *args, **kwargs):
            if self._on and self._counts(tensor):
                self.seen[f"Tensor.{name}"] += 1
            return method(tensor, *args, **kwargs)

        return counted

    def __enter__(self) -> HostSyncs:
        for name in COPIES:  # restored on exit, inherited from torch's C base class again where they were
            self._patches.enter_context(
                mock.patch.object(torch.Tensor, name, self._counting_copy(name, getattr(torch.Tensor, name)))
            )
        if self.on_cuda:
            self._warnings = self._patches.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        self.on = False
        super().__exit__(*exc)
        self._patches.close()
