"""Every choice a run makes because it trains on a CUDA GPU, made here and nowhere else (docs/design.md §7).

- precision (trainer.precision's default): bf16-mixed autocast on a GPU that computes in bf16 (Ampere and
  later); 16-mixed (fp16 autocast with a loss scaler) on one that only emulates it (V100, T4); 32-true elsewhere;
- fused AdamW (one kernel per step for every parameter), unless gradients are clipped: Lightning clips
  between backward and step, which a fused step that unscales inside its kernel leaves no room for;
- TF32 for float32 matrix products outside autocast (Ampere and later; a no-op before).

``speed.rehearse_cuda=true`` makes any device take the choices of a bf16 GPU: the tests train, resume,
analyse and report on the CPU with them (bf16 autocast and fused AdamW run there too). ``torch.compile``
is its own switch, ``speed.compile``, the same on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omegaconf import DictConfig

CUDA_ACCELERATORS = ("auto", "gpu", "cuda")  # trainer.accelerator values that put a run on a visible CUDA GPU


@dataclass(frozen=True)
class CudaChoices:
    cuda: bool = False  # the run takes CUDA's choices: it trains on a CUDA GPU, or rehearses one
    bf16: bool = False  # the GPU computes in bf16 natively

    @property
    def precision(self) -> str:
        if not self.cuda:
            return "32-true"
        return "bf16-mixed" if self.bf16 else "16-mixed"

    @property
    def tf32(self) -> bool:
        return self.cuda

    def fused_adamw(self, clipping: bool) -> bool:
        return self.cuda and not clipping


def on_cuda(accelerator: str = "auto") -> bool:
    """Whether a run on ``trainer.accelerator`` trains on a CUDA GPU: it asks for one (or for any) and one is
    visible. The device the developer tools time a run's step on."""
    import torch

    return str(accelerator) in CUDA_ACCELERATORS and torch.cuda.is_available()


def cuda_choices(accelerator: str = "auto", rehearse: bool = False) -> CudaChoices:
    """The choices for a run on ``trainer.accelerator`` (``rehearse``: those of a bf16 GPU, wherever it runs).

    The bf16 check leaves out emulation (``torch.cuda.is_bf16_supported``'s default counts it, so a V100 would
    say yes and run bf16 slower than fp32). It initialises CUDA in this process, as Lightning's DDP launcher
    allows (its ranks are new processes); a forking strategy (``ddp_fork``) would need it left uninitialised."""
    if rehearse:
        return CudaChoices(cuda=True, bf16=True)
    if not on_cuda(accelerator):
        return CudaChoices()
    import torch

    return CudaChoices(cuda=True, bf16=torch.cuda.is_bf16_supported(including_emulation=False))


def run_choices(cfg: DictConfig) -> CudaChoices:
    """The choices of the run a composed config describes: its ``trainer.accelerator`` and ``speed.rehearse_cuda``.
    (Its precision is ``trainer.precision``, which defaults to these choices' and may be set apart.)"""
    return cuda_choices(cfg.trainer.accelerator, bool(cfg.speed.rehearse_cuda))


def fused_adamw(cfg: DictConfig) -> bool:
    """Whether the run ``cfg`` describes steps with fused AdamW: CUDA's choice, unless it clips gradients."""
    return run_choices(cfg).fused_adamw(clipping=bool(cfg.trainer.gradient_clip_val))


def use_tensor_cores(choices: CudaChoices) -> None:
    """TF32 for float32 matrix products where ``choices`` take it. Set before a trainer starts, so Lightning finds
    it set."""
    if choices.tf32:
        import torch

        torch.set_float32_matmul_precision("high")
