"""The one timed step of the developer tools: seconds per step after a warm-up, the device synchronised; and the
plain PyTorch training step they time beside the project's (``bare_step``).

``StepClock`` timestamps the start of every step from step ``warmup`` to step ``warmup + steps``, so a step's
time includes everything between two starts (fetching its batch, every hook). On the CPU the figure is the
median of those step times (robust to other jobs' bursts on a shared machine); on CUDA, where launches run
ahead of the device, it is the whole span over ``steps``, the device synchronised at both ends only.

``time_steps`` drives a step callable through the clock; a loop that someone else drives (Lightning's
``trainer.fit``) calls ``StepClock.at_step`` from a hook instead.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import nullcontext
from time import perf_counter

import torch
from torch import Tensor, nn

__all__ = ["StepClock", "bare_step", "sync", "time_steps"]


def sync(device: torch.device) -> None:
    """Waits for the device's queued work (CUDA runs asynchronously; the CPU has nothing to wait for)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepClock:
    """Start times of steps ``warmup .. warmup + steps``; the device is synchronised at the two ends."""

    def __init__(self, warmup: int, steps: int, device: torch.device) -> None:
        if warmup < 0 or steps < 1:
            raise ValueError(f"need warmup >= 0 and steps >= 1, got warmup={warmup}, steps={steps}")
        self.warmup, self.steps, self.device = warmup, steps, device
        self.stamps: list[float] = []

    def at_step(self, index: int) -> bool:
        """Call at the start of step ``index``; True once the last timestamp is taken."""
        if self.warmup <= index <= self.warmup + self.steps:
            if index in (self.warmup, self.warmup + self.steps):
                sync(self.device)
            self.stamps.append(perf_counter())
        return len(self.stamps) == self.steps + 1

    def seconds_per_step(self) -> float:
        if len(self.stamps) != self.steps + 1:
            raise RuntimeError(f"timed {max(len(self.stamps) - 1, 0)} of {self.steps} steps: too few batches")
        if self.device.type == "cpu":
            return statistics.median(b - a for a, b in zip(self.stamps, self.stamps[1:]))
        return (self.stamps[-1] - self.stamps[0]) / self.steps


def time_steps(step: Callable[[], object], warmup: int, steps: int, device: torch.device) -> float:
    """Seconds per call of ``step`` on ``device``: ``warmup`` untimed calls, then ``steps`` timed ones.

    A step that draws its batch with ``next`` ends the timing when its batches run out (StopIteration);
    too few timed steps is then an error."""
    clock = StepClock(warmup, steps, device)
    index = 0
    while not clock.at_step(index):
        try:
            step()
        except StopIteration:
            break
        index += 1
    return clock.seconds_per_step()


def bare_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable, device: torch.device, precision: str
) -> Callable[[Tensor, Tensor], None]:
    """One plain PyTorch training step of ``model`` in a run's ``trainer.precision``, as Lightning's precision plugin
    takes it: bf16 or fp16 autocast, and under 16-mixed a loss scaler (the loss scaled up for backward, the
    gradients unscaled in the optimizer's step, inside fused AdamW's kernel, and the step skipped on an overflow)."""
    if precision in ("bf16-mixed", "16-mixed"):
        autocast = torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16-mixed" else torch.float16)
    elif precision in ("32-true", "32"):
        autocast = nullcontext()
    else:
        raise ValueError(f"the bare step does not support precision '{precision}'")
    scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None

    def step(images: Tensor, labels: Tensor) -> None:
        with autocast:
            loss = loss_fn(model(images), labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step
