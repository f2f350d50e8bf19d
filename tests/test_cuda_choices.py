"""The choices a run makes for CUDA, decided in one place (cuda_choices.py): the precision follows the accelerator
the run asks for and the GPU's bf16 support, fused AdamW gives way to clipping, TF32 comes with CUDA, and
speed.rehearse_cuda=true takes all of them on any device."""

from __future__ import annotations

import pytest
import torch

from vitladder.config import compose_rung
from vitladder.cuda_choices import CudaChoices, cuda_choices
from vitladder.training.module import optimizer_kwargs, use_tensor_cores


@pytest.fixture
def gpu(monkeypatch):
    """``gpu(bf16=...)``: this process sees a CUDA GPU that does (Ampere and later) or does not (V100, T4)
    compute in bf16; ``asked`` records the including_emulation argument of each bf16 query."""
    asked = []

    def visible(bf16: bool) -> list:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

        def is_bf16_supported(including_emulation: bool = True) -> bool:
            asked.append(including_emulation)
            return bf16 or including_emulation  # torch's default counts emulation: a V100 says yes

        monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
        return asked

    return visible


@pytest.mark.parametrize("accelerator", ["auto", "gpu", "cuda"])
@pytest.mark.parametrize("bf16, precision", [(True, "bf16-mixed"), (False, "16-mixed")])
def test_a_cuda_gpu_gets_bf16_autocast_where_it_computes_in_bf16_and_fp16_autocast_where_not(
    gpu, accelerator, bf16, precision
):
    asked = gpu(bf16=bf16)
    choices = cuda_choices(accelerator)
    assert choices == CudaChoices(cuda=True, bf16=bf16) and choices.precision == precision
    assert asked == [False], "emulated bf16 (V100, T4) is slower than fp32: it must not count"
    assert compose_rung("patch8", [f"trainer.accelerator={accelerator}"]).trainer.precision == precision
    assert choices.tf32 and choices.fused_adamw(clipping=False)


def test_the_cpu_gets_full_precision_even_where_cuda_is_visible(gpu):
    gpu(bf16=True)
    assert cuda_choices("cpu") == CudaChoices() and CudaChoices().precision == "32-true"
    assert compose_rung("patch8", ["trainer.accelerator=cpu"]).trainer.precision == "32-true"
    assert not CudaChoices().tf32 and not CudaChoices().fused_adamw(clipping=False)


def test_without_cuda_every_accelerator_gets_the_cpus_choices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for accelerator in ("auto", "gpu", "cuda", "cpu", "mps"):
        assert cuda_choices(accelerator) == CudaChoices()
    assert compose_rung("patch8").trainer.precision == "32-true"


def test_an_explicit_precision_is_kept(gpu):
    gpu(bf16=True)
    assert compose_rung("patch8", ["trainer.precision=32-true"]).trainer.precision == "32-true"


def test_the_rehearsal_takes_a_bf16_gpus_choices_on_any_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for accelerator in ("cpu", "auto"):
        assert cuda_choices(accelerator, rehearse=True) == CudaChoices(cuda=True, bf16=True)
    cfg = compose_rung("patch8", ["trainer.accelerator=cpu", "speed.rehearse_cuda=true"])
    assert cfg.trainer.precision == "bf16-mixed"


def test_fused_adamw_gives_way_to_gradient_clipping():
    # Lightning clips between backward and the optimizer step, which a fused step leaves no room for.
    assert CudaChoices(cuda=True, bf16=True).fused_adamw(clipping=False)
    assert not CudaChoices(cuda=True, bf16=True).fused_adamw(clipping=True)
    assert not CudaChoices(cuda=True, bf16=False).fused_adamw(clipping=True)


def test_the_benchmarks_bare_loop_takes_the_runs_choices(gpu, matmul_precision):
    gpu(bf16=True)
    assert optimizer_kwargs(torch.device("cuda", 0)) == {"fused": True}
    assert optimizer_kwargs(torch.device("cuda", 0), clipping=True) == {}
    assert optimizer_kwargs(torch.device("cpu")) == {}
    use_tensor_cores(CudaChoices())
    assert torch.get_float32_matmul_precision() == "highest"
    use_tensor_cores()  # this machine's choices: a CUDA GPU is visible
    assert torch.get_float32_matmul_precision() == "high"
