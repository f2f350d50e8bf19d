"""Every choice a run makes because it trains on a CUDA GPU, made here alone (docs/design.md §7): the precision
(bf16-mixed where the GPU computes in bf16, Ampere on; 16-mixed with a loss scaler where it emulates it, V100, T4;
32-true elsewhere), fused AdamW unless gradients are clipped (Lightning clips between backward and a step that a
fused kernel leaves no room for) and TF32 matrix products. ``speed.rehearse_cuda=true`` takes a bf16 GPU's choices
on any device: the tests rehearse them on the CPU."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig


@dataclass(frozen=True)
class CudaChoices:
    cuda: bool = False  # the run takes CUDA's choices: it trains on a CUDA GPU, or rehearses one
    bf16: bool = False  # the GPU computes in bf16 natively

    @property
    def precision(self) -> str:
        return ("bf16-mixed" if self.bf16 else "16-mixed") if self.cuda else "32-true"

    @property
    def tf32(self) -> bool:
        return self.cuda

    def fused_adamw(self, clipping: bool) -> bool:
        return self.cuda and not clipping


def on_cuda(accelerator: str = "auto") -> bool:
    """Whether a run on ``trainer.accelerator`` trains on a CUDA GPU: it asks for one (or any), one is visible."""
    import torch

    return str(accelerator) in ("auto", "gpu", "cuda") and torch.cuda.is_available()


def cuda_choices(accelerator: str = "auto", rehearse: bool = False) -> CudaChoices:
    """The choices of a run on ``trainer.accelerator`` (``rehearse``: a bf16 GPU's). The bf16 check leaves emulation
    out (a V100 would run bf16, slower than fp32) and initialises CUDA here, which Lightning's DDP launcher allows
    (its ranks are new processes); a forking strategy not."""
    if rehearse or not on_cuda(accelerator):
        return CudaChoices(cuda=rehearse, bf16=rehearse)
    import torch

    return CudaChoices(cuda=True, bf16=torch.cuda.is_bf16_supported(including_emulation=False))


def run_choices(cfg: DictConfig) -> CudaChoices:
    """The choices of the run ``cfg`` (its precision: trainer.precision, which defaults to theirs)."""
    return cuda_choices(cfg.trainer.accelerator, bool(cfg.speed.rehearse_cuda))


def fused_adamw(cfg: DictConfig) -> bool:
    return run_choices(cfg).fused_adamw(clipping=bool(cfg.trainer.gradient_clip_val))


def use_tensor_cores(choices: CudaChoices) -> None:
    """TF32 for float32 matrix products where ``choices`` take it, before a trainer starts (Lightning checks it)."""
    if choices.tf32:
        import torch

        torch.set_float32_matmul_precision("high")
