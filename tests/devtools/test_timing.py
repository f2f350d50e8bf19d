"""The one timed step of the benchmark, the estimate and the GPU check, on a scripted clock: warm-up steps are
untimed, the device is synchronised at both ends of the timed steps only, and the figure is the CPU's median or
CUDA's span over the steps. The bare training step they time trains in the run's precision, with a loss scaler
under 16-mixed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitladder.devtools import timing
from vitladder.devtools.timing import StepClock, bare_step, time_steps


@pytest.fixture
def events(monkeypatch):
    """What happens, in order: "step", "sync" and "stamp"; the clock reads the scripted times one by one."""
    log: list[str] = []
    times = iter([10.0, 11.0, 15.0, 17.0, 18.0, 19.0])  # step times 1, 4, 2, 1, 1

    def stamp() -> float:
        log.append("stamp")
        return next(times)

    monkeypatch.setattr(timing, "perf_counter", stamp)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    return log


def test_warmup_steps_are_untimed_and_cuda_is_synchronised_at_both_ends(events):
    seconds = time_steps(lambda: events.append("step"), warmup=2, steps=3, device=torch.device("cuda"))
    timed = ["stamp", "step"] * 3
    assert events == ["step", "step", "sync", *timed[:-2], "stamp", "step", "sync", "stamp"]
    assert events.count("step") == 5
    assert seconds == pytest.approx((17.0 - 10.0) / 3)  # the whole span: CUDA runs ahead of the host


def test_the_cpu_figure_is_the_median_step_and_nothing_is_synchronised(events):
    seconds = time_steps(lambda: events.append("step"), warmup=1, steps=5, device=torch.device("cpu"))
    assert "sync" not in events and events.count("step") == 6 and events.count("stamp") == 6
    assert seconds == pytest.approx(1.0)  # median of 1, 4, 2, 1, 1; their mean would be 1.8


def test_one_step_without_warmup_is_one_call_between_two_synchronised_stamps(events):
    seconds = time_steps(lambda: events.append("step"), warmup=0, steps=1, device=torch.device("cuda"))
    assert events == ["sync", "stamp", "step", "sync", "stamp"] and seconds == pytest.approx(1.0)


def test_batches_running_out_is_an_error_not_a_figure():
    batches = iter(range(3))  # one warm-up step, two timed, then none left
    with pytest.raises(RuntimeError, match="timed 2 of 4 steps"):
        time_steps(lambda: next(batches), warmup=1, steps=4, device=torch.device("cpu"))


def test_a_clock_driven_from_outside_stops_after_its_last_stamp():
    clock = StepClock(warmup=1, steps=2, device=torch.device("cpu"))
    assert [clock.at_step(index) for index in range(4)] == [False, False, False, True]
    assert len(clock.stamps) == 3 and clock.seconds_per_step() >= 0
    with pytest.raises(ValueError, match="steps >= 1"):
        StepClock(warmup=0, steps=0, device=torch.device("cpu"))


@pytest.mark.parametrize(
    "precision, dtype, scaled",
    [("32-true", torch.float32, 0), ("bf16-mixed", torch.bfloat16, 0), ("16-mixed", torch.float16, 1)],
)
def test_the_bare_step_trains_in_the_runs_precision_with_a_loss_scaler_under_fp16(
    monkeypatch, precision, dtype, scaled
):
    model = nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)  # as on CUDA: the unscaling inside its kernel
    logits_dtypes, scales = [], []

    def loss_fn(logits, labels):
        logits_dtypes.append(logits.dtype)
        return F.cross_entropy(logits, labels)

    scaler_step = torch.amp.GradScaler.step
    monkeypatch.setattr(
        torch.amp.GradScaler, "step", lambda self, opt: scales.append(self.get_scale()) or scaler_step(self, opt)
    )
    before = model.weight.detach().clone()
    step = bare_step(model, optimizer, loss_fn, torch.device("cpu"), precision)
    step(torch.randn(8, 4), torch.randint(0, 3, (8,)))
    assert logits_dtypes == [dtype] and len(scales) == scaled and all(scale > 1 for scale in scales)
    assert not torch.equal(model.weight, before) and model.weight.grad is None, "stepped, then zeroed"
    with pytest.raises(ValueError, match="'bf16-true'"):
        bare_step(model, optimizer, loss_fn, torch.device("cpu"), "bf16-true")
