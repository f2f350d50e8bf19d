"""Counting host syncs: the points where the host waits for the device, which a training loop should not have.

On CUDA the host runs ahead of the device, queueing kernels; any call that needs a tensor's value on the host
(``.item()``, ``if tensor:``, ``float(tensor)``, ``.tolist()``, ``.cpu()``, ``.numpy()``) makes it wait for the
queue to drain. ``HostSyncs`` counts those calls while it is switched on, by wrapping these methods of
``torch.Tensor``, so the count is the same on the CPU, where nothing waits, as on CUDA. On CUDA it also counts
what ``torch.cuda.set_sync_debug_mode("warn")`` reports: the synchronising operations inside torch that no Python
method shows (``nonzero``, indexing with a mask, a copy to the host). Not seen on the CPU: those operations, and
``tensor.to("cpu")`` (on the CPU every tensor is already there).

Tensors in ``exempt`` (by id) are not counted: those that live on the host on CUDA too, such as the step counts
of torch's non-fused AdamW, which it reads with ``.item()`` (fused AdamW keeps them on the device, unread).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from functools import wraps

import torch

__all__ = ["SYNCING_METHODS", "HostSyncs"]

# The torch.Tensor methods that hand a value to the host.
SYNCING_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")
_ABSENT = object()


class HostSyncs:
    """A context in which ``on`` switches counting on and off; ``calls`` counts by method, ``cuda`` the
    synchronising operations CUDA's debug mode reported (None off CUDA)."""

    def __init__(self, cuda: bool | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.cuda: int | None = 0 if (torch.cuda.is_available() if cuda is None else cuda) else None
        self.exempt: set[int] = set()  # ids of host-side tensors (see the module's docstring)
        self._on = False
        self._depth = 0  # a counted method that calls another counts once
        self._saved: dict[str, object] = {}
        self._warnings: list[warnings.WarningMessage] = []
        self._catch: warnings.catch_warnings | None = None

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    @property
    def on(self) -> bool:
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        if value == self._on:
            return
        self._on = value
        if self.cuda is not None:
            torch.cuda.set_sync_debug_mode("warn" if value else "default")
            if not value:
                self.cuda += sum("synchronizing" in str(w.message) for w in self._warnings)
                self._warnings.clear()

    def _wrap(self, name: str, method: Callable) -> Callable:
        @wraps(method)
        def counted(tensor, *args, **kwargs):
            if self._on and self._depth == 0 and id(tensor) not in self.exempt:
                self.calls[name] += 1
            self._depth += 1
            try:
                return method(tensor, *args, **kwargs)
            finally:
                self._depth -= 1

        return counted

    def __enter__(self) -> HostSyncs:
        for name in SYNCING_METHODS:
            self._saved[name] = torch.Tensor.__dict__.get(name, _ABSENT)
            setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
        if self.cuda is not None:
            self._catch = warnings.catch_warnings(record=True)
            self._warnings = self._catch.__enter__()
            warnings.simplefilter("always")
        return self

    def __exit__(self, *exc) -> None:
        self.on = False
        if self._catch is not None:
            self._catch.__exit__(*exc)
            self._catch = None
        for name, saved in self._saved.items():
            if saved is _ABSENT:
                delattr(torch.Tensor, name)  # inherited from torch's C base class again
            else:
                setattr(torch.Tensor, name, saved)
        self._saved.clear()
