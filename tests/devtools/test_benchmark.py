"""The benchmark runs end to end with tiny step counts and writes every figure (no timing assertions); its host
sync count sees a sync planted in the loop, and its checkpoint is a real last.ckpt that resumes. Its timing, on a
scripted clock: warm-up calls are untimed, the device is synchronised at both ends of the timed steps only, and the
figure is the CPU's median or CUDA's span over the steps. The bare training step trains in the run's precision, with
a loss scaler under 16-mixed."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from entry_points import load_script
from torch import nn

from vitladder.config import compose_rung
from vitladder.devtools import benchmark
from vitladder.devtools.benchmark import bare_step, format_table, host_step_counts, run_benchmark, settings_for

FIGURES = set(
    "project_images_per_s bare_images_per_s project_over_bare project_step_s bare_step_s data_batch_s data_share "
    "epoch_s analysis_s forward_s analysis_over_forward analysis_images parameters precision settings rounds "
    "meets_targets host_syncs_per_step cuda_syncs_per_step checkpoint_s checkpoint_mib checkpoint_share "
    "probe_s_per_1000_images probes_over_epoch".split()
)
TINY_RUN = dict(batch_size=16, warmup=1, steps=2, rounds=2, analysis_images=8, analysis_rounds=1)


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    return run_benchmark(["tiny"], "cpu", TINY_RUN, log=lambda _: None, folder=tmp_path_factory.mktemp("bench"))


def test_the_benchmark_reports_every_figure(tiny_report):
    report = tiny_report
    assert report["device"] == "cpu" and set(report["widths"]) == {"tiny"}
    figures = report["widths"]["tiny"]
    assert FIGURES <= set(figures)
    positive = "project_images_per_s bare_images_per_s project_over_bare data_share epoch_s analysis_over_forward"
    for key in positive.split():
        assert figures[key] > 0, key
    assert figures["epoch_s"] == pytest.approx(45_000 / figures["project_images_per_s"])
    assert figures["settings"]["embed_dim"] == 48 and figures["analysis_images"] == 8
    assert all(len(times) == 2 for times in figures["rounds"].values())
    assert figures["meets_targets"]["analysis_over_forward"] is None  # the 1.3x target is the full model's
    assert figures["host_syncs_per_step"]["train"] == 0, "a training step never waits for the device"
    assert figures["cuda_syncs_per_step"] is None  # CUDA's own count: on CUDA only
    assert 1 < figures["checkpoint_mib"] < 5 and figures["checkpoint_s"] > 0  # weights + AdamW at width 48
    # An epoch is shorter than the full profile's 60 s interval at this speed: one save a minute.
    assert figures["checkpoint_share"] == pytest.approx(figures["checkpoint_s"] / max(60, figures["epoch_s"]))
    assert figures["meets_targets"]["checkpoint_share"] == (figures["checkpoint_share"] <= 0.05)
    # Every configured probe timed on 8 images, reported per 1,000, against one epoch of the same model.
    probes = figures["probe_s_per_1000_images"]
    assert list(probes) == list(compose_rung("patch4", []).analysis.probes) and all(t > 0 for t in probes.values())
    assert figures["probes_over_epoch"] == pytest.approx(sum(probes.values()) / figures["epoch_s"])
    table = format_table(report)
    for label in (
        "project / bare",
        "data share of a step",
        "attention probe / forward",
        "CIFAR-10 epoch",
        "host syncs / train step",
        "host syncs / eval step",
        "last.ckpt write + fsync",
        "all probes / epoch",
        "probe head_ablation s / 1k images",
    ):
        assert label in table
    assert "(from 8)" in table  # measured on fewer images than it says: said so


def test_a_sync_planted_in_a_step_is_counted_and_the_checkpoint_is_a_real_last_ckpt(tiny_report, monkeypatch, tmp_path):
    from vitladder.training.checkpoint_io import checkpoint_epoch
    from vitladder.training.module import RecipeModule

    training_step, validation_step = RecipeModule.training_step, RecipeModule.validation_step

    def syncing_train(self, batch, batch_idx):
        loss = training_step(self, batch, batch_idx)
        loss.item()  # one sync a step
        return loss

    def syncing_eval(self, batch, batch_idx):
        validation_step(self, batch, batch_idx)
        float(batch[1].sum()), batch[1].tolist()  # two a step

    monkeypatch.setattr(RecipeModule, "training_step", syncing_train)
    monkeypatch.setattr(RecipeModule, "validation_step", syncing_eval)
    s = replace(settings_for("tiny", "cpu"), **TINY_RUN)
    cfg = benchmark.bench_config(s)
    saved = []
    save_checkpoint = benchmark.AtomicCheckpointIO.save_checkpoint

    def keep_one(io, checkpoint, path, storage_options=None):
        save_checkpoint(io, checkpoint, path, storage_options)
        saved.append(checkpoint_epoch(path))  # a Lightning checkpoint this project resumes from

    monkeypatch.setattr(benchmark.AtomicCheckpointIO, "save_checkpoint", keep_one)
    costs = benchmark.time_loop_costs(cfg, benchmark.bench_data(cfg, s), s, tmp_path)
    baseline = tiny_report["widths"]["tiny"]["host_syncs_per_step"]
    assert costs["host_syncs_per_step"] == {"train": baseline["train"] + 1, "eval": baseline["eval"] + 2}
    assert len(saved) == 1 + benchmark.CHECKPOINT_SAVES  # one untimed, then the timed ones
    assert list(tmp_path.iterdir()) == [], "the timed checkpoints are removed"


def test_the_script_writes_the_json(tmp_path, repo_root, capsys):
    out = tmp_path / "bench.json"
    bench = load_script("bench")
    args = "--width tiny --device cpu --batch-size 16 --warmup 1 --steps 1 --rounds 1 --analysis-images 16"
    bench.main([*args.split(), "--rehearse-cuda", "--out", str(out)])
    report = json.loads(out.read_text())
    assert FIGURES <= set(report["widths"]["tiny"])
    assert report["widths"]["tiny"]["precision"] == "bf16-mixed", "a bf16 GPU's choices"
    assert report["targets"]["project_over_bare_min"] == 0.95
    assert "project / bare" in capsys.readouterr().out


def test_default_settings_fit_the_cpu():
    tiny, full = settings_for("tiny", "cpu"), settings_for("full", "cpu")
    assert (tiny.embed_dim, full.embed_dim) == (48, 384)
    assert full.batch_size * (full.warmup + full.steps + 1) * full.rounds * 2 <= 3200  # 20-40 img/s: a few minutes
    with pytest.raises(ValueError, match="width"):
        settings_for("huge", "cpu")


def test_the_gpu_benchmark_times_the_recipes_batch():
    assert settings_for("full", "cuda").batch_size == compose_rung("patch4", []).data.batch_size == 128


def test_under_the_cuda_settings_a_whole_training_step_makes_no_host_sync(tmp_path, monkeypatch, matmul_precision):
    # speed.rehearse_cuda: bf16-mixed and fused AdamW, whose step counts stay with the parameters, unread; MixUp/CutMix,
    # label smoothing and drop path (stochastic_depth). From one training batch's start to the next: the batch
    # fetched, the step, backward, AdamW, the schedule and every hook.

    exempted = []

    def recorded(optimizers):
        exempted.append(host_step_counts(optimizers))
        return exempted[-1]

    monkeypatch.setattr(benchmark, "host_step_counts", recorded)
    s = replace(settings_for("tiny", "cpu"), **TINY_RUN, rung="stochastic_depth", rehearse_cuda=True)
    cfg = benchmark.bench_config(s)
    assert cfg.trainer.precision == "bf16-mixed" and cfg.mixup.cutmix_alpha > 0
    costs = benchmark.time_loop_costs(cfg, benchmark.bench_data(cfg, s), s, tmp_path)
    assert costs["host_syncs_per_step"] == {"train": 0, "eval": 0}
    assert len(exempted) == s.warmup + s.steps + 1 and exempted == [set()] * len(exempted), "nothing exempted"


def test_only_the_step_counts_of_an_unfused_adamw_are_host_tensors():
    params = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))]
    unfused, fused = torch.optim.AdamW(params[:1]), torch.optim.AdamW(params[1:], fused=True)
    for param in params:
        param.grad = torch.ones_like(param)
    unfused.step(), fused.step()
    assert host_step_counts([unfused, fused]) == {id(unfused.state[params[0]]["step"])}


@pytest.fixture
def events(monkeypatch):
    """What happens, in order: "step", and "sync" for a stamp of the clock that synchronises the GPU or "stamp" for a
    plain one; the two clocks read the scripted times one by one."""
    log: list[str] = []
    times = iter([0.0, 1.0, 5.0, 7.0, 8.0, 9.0])

    def clock(event: str):
        return lambda: log.append(event) or next(times)

    monkeypatch.setattr(benchmark, "synced", clock("sync"))
    monkeypatch.setattr(benchmark, "perf_counter", clock("stamp"))
    return log


def test_the_cpu_figure_is_the_median_call_after_untimed_warmup_calls(events):
    seconds = benchmark.seconds_per_call(lambda: events.append("step"), 5, "cpu", warmup=2)
    assert events[:3] == ["step", "step", "sync"] and events.count("step") == 7 and events[-1] == "sync"
    assert seconds == pytest.approx(1.0)  # the median of 1, 4, 2, 1, 1; their mean would be 1.8


def test_the_cuda_figure_is_the_span_over_the_calls_synchronised_at_both_ends_only(events):
    seconds = benchmark.seconds_per_call(lambda: events.append("step"), 3, "cuda", warmup=1)
    assert events == ["step", "sync", "step", "stamp", "step", "stamp", "step", "sync"]
    assert seconds == pytest.approx(7.0 / 3)  # the whole span: CUDA runs ahead of the host


def test_lightnings_steps_are_stamped_at_their_starts_the_device_synchronised_at_the_first_and_last(events):
    starts = benchmark._StepStarts(first=1, last=4)
    for index in range(6):
        events.append("step")
        starts.on_train_batch_start(None, None, None, index)
    assert events == ["step", "step", "sync", "step", "stamp", "step", "stamp", "step", "sync", "step"]
    assert starts.starts == [0.0, 1.0, 5.0, 7.0]
    assert benchmark.per_step([0.0, 1.0, 5.0, 7.0, 8.0, 9.0], "cpu") == pytest.approx(1.0)  # median of 1, 4, 2, 1, 1
    assert benchmark.per_step([0.0, 1.0, 5.0, 7.0, 8.0, 9.0], "cuda") == pytest.approx(1.8)  # 9 s over 5 steps


def test_the_clock_waits_for_the_gpus_queued_work_once_cuda_is_in_use(monkeypatch):
    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waits.append(device))
    benchmark.synced()
    assert waits == [], "nothing to wait for, and CUDA is not initialised to find out"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    benchmark.synced()
    assert waits == [None]


def test_batches_running_out_is_an_error_not_a_figure():
    batches = iter(range(3))  # one warm-up step, two timed, then none left
    with pytest.raises(StopIteration):
        benchmark.seconds_per_call(lambda: next(batches), 4, "cpu", warmup=1)


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

    def step(self, opt):
        scales.extend([self.get_scale()] if self.is_enabled() else [])
        return scaler_step(self, opt)

    monkeypatch.setattr(torch.amp.GradScaler, "step", step)
    before = model.weight.detach().clone()
    bare_step(model, optimizer, loss_fn, torch.device("cpu"), precision)(torch.randn(8, 4), torch.randint(0, 3, (8,)))
    assert logits_dtypes == [dtype] and len(scales) == scaled and all(scale > 1 for scale in scales)
    assert not torch.equal(model.weight, before) and model.weight.grad is None, "stepped, then zeroed"
    with pytest.raises(ValueError, match="'bf16-true'"):
        bare_step(model, optimizer, loss_fn, torch.device("cpu"), "bf16-true")
