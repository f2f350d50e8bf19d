"""The one timed step of the developer tools: seconds per step after a warm-up, the device synchronised.

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
from time import perf_counter

import torch

__all__ = ["StepClock", "sync", "time_steps"]


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
