"""The choices a run makes for CUDA, decided in one place (cuda_choices.py): the precision follows the accelerator
the run asks for and the GPU's bf16 support, fused AdamW gives way to clipping, TF32 comes with CUDA, and
speed.rehearse_cuda=true takes all of them on any device."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

import vitladder
from vitladder.config import compose_rung
from vitladder.cuda_choices import CudaChoices, cuda_choices, fused_adamw, on_cuda, run_choices, use_tensor_cores


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
def test_a_gpu_gets_bf16_autocast_where_it_computes_in_bf16_else_fp16_autocast(gpu, accelerator, bf16, precision):
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


def test_a_run_and_the_developer_tools_take_the_choices_of_its_config(gpu, matmul_precision):
    # build_module, the benchmark's bare loop, the estimate and the GPU check read them through here.
    gpu(bf16=True)
    assert on_cuda("auto") and on_cuda("gpu") and not on_cuda("cpu")
    on_the_gpu, clipped, on_the_cpu = (
        compose_rung("patch8", overrides)
        for overrides in ([], ["trainer.gradient_clip_val=1.0"], ["trainer.accelerator=cpu"])
    )
    assert run_choices(on_the_gpu) == CudaChoices(cuda=True, bf16=True) and run_choices(on_the_cpu) == CudaChoices()
    assert fused_adamw(on_the_gpu) and not fused_adamw(clipped) and not fused_adamw(on_the_cpu)
    assert fused_adamw(compose_rung("patch8", ["trainer.accelerator=cpu", "speed.rehearse_cuda=true"]))
    use_tensor_cores(run_choices(on_the_cpu))
    assert torch.get_float32_matmul_precision() == "highest"
    use_tensor_cores(run_choices(on_the_gpu))
    assert torch.get_float32_matmul_precision() == "high"


# --- every CUDA-conditioned line of src/, and what runs it on the CPU --------------------------------------------

PACKAGE = Path(vitladder.__file__).parent
CUDA_NAME = re.compile(r"cuda(:\d+)?")  # a device or accelerator name
CUDA_MODULE = re.compile(r"torch\.(cuda|backends\.cuda|backends\.cudnn)\.")

# (file, function) -> the tests that run its CUDA branch with CUDA's value on the CPU (a forced setting or a GPU
# the test makes visible). A new CUDA-conditioned line anywhere in src/ must be added here with its rehearsal.
REHEARSED = {
    ("cuda_choices.py", "on_cuda"): [
        "test_a_gpu_gets_bf16_autocast_where_it_computes_in_bf16_else_fp16_autocast",
        "test_a_run_and_the_developer_tools_take_the_choices_of_its_config",
        "test_the_estimate_times_the_runs_device_precision_and_adamw",
    ],
    ("cuda_choices.py", "cuda_choices"): [
        "test_a_gpu_gets_bf16_autocast_where_it_computes_in_bf16_else_fp16_autocast",
        "test_the_cpu_gets_full_precision_even_where_cuda_is_visible",
        "test_the_cuda_choices_train_resume_analyse_and_report_a_smoke_ladder_on_the_cpu",
        "test_gradient_clipping_trains_under_the_cuda_settings",
        "test_a_gpu_without_bf16_trains_with_fp16_autocast_and_a_loss_scaler",
    ],
    ("devtools/estimate.py", "estimate_run_seconds"): ["test_the_estimate_times_the_runs_device_precision_and_adamw"],
    ("devtools/syncs.py", "HostSyncs.on"): [
        "test_on_cuda_host_tensors_are_left_out_and_the_sync_debug_mode_is_counted"
    ],
    ("devtools/benchmark.py", "per_step"): [
        "test_lightnings_steps_are_stamped_at_their_starts_the_device_synchronised_at_the_first_and_last",
        "test_the_cuda_figure_is_the_span_over_the_calls_synchronised_at_both_ends_only",
    ],
    ("devtools/benchmark.py", "synced"): ["test_the_clock_waits_for_the_gpus_queued_work_once_cuda_is_in_use"],
}
# The developer tools' own CUDA lines, which only a GPU runs (make bench --device cuda, make gpu-check): what each
# decides. Each is a measurement setting, a name or a device, not a run's choice: those come from cuda_choices.py.
ON_A_GPU_ONLY = {
    ("devtools/benchmark.py", "settings_for"): "the benchmark's batch and step counts on a GPU",
    ("devtools/benchmark.py", "machine"): "the GPU's name in bench.json and gpu_check.json",
    ("devtools/benchmark.py", "time_loop_costs"): "CUDA's sync debug mode on while the steps' syncs are counted",
    ("devtools/estimate.py", "step_cost"): "the batch the estimate times: the run's on a GPU, at most 64 on a CPU",
    ("devtools/gpu_check.py", "benchmark"): "the GPU check's warm-up and timed steps",
    ("devtools/gpu_check.py", "run_check"): "the device the check runs on",
    ("devtools/gpu_check.py", "markdown"): "the CUDA version's line of gpu_check.md",
}


def cuda_conditioned(path: Path) -> set[str]:
    """The functions (dotted, "<module>" for the top level) of ``path`` that name CUDA: torch.cuda.*,
    torch.backends.cuda*, .is_cuda, or a "cuda" / "cuda:N" string (device.type == "cuda", accelerator names)."""
    found = set()

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{scope}.{child.name}" if scope else child.name)
                continue
            if isinstance(child, ast.Constant) and isinstance(child.value, str) and CUDA_NAME.fullmatch(child.value):
                found.add(scope or "<module>")
            if isinstance(child, ast.Attribute) and (child.attr == "is_cuda" or CUDA_MODULE.match(ast.unparse(child))):
                found.add(scope or "<module>")
            visit(child, scope)

    visit(ast.parse(path.read_text()), "")
    return found


def test_every_cuda_choice_in_src_is_rehearsed_on_the_cpu_or_declared_gpu_only(repo_root):
    found = {(str(p.relative_to(PACKAGE)), scope) for p in PACKAGE.rglob("*.py") for scope in cuda_conditioned(p)}
    assert {("cuda_choices.py", "cuda_choices"), ("devtools/benchmark.py", "per_step")} <= found  # the scan works
    assert found == REHEARSED.keys() | ON_A_GPU_ONLY.keys(), (
        "a CUDA-conditioned function was added or removed: decide it in cuda_choices.py, or list it here with the "
        "test that runs it on the CPU"
    )
    tests = "\n".join(p.read_text() for p in (repo_root / "tests").rglob("test_*.py"))
    missing = {name for names in REHEARSED.values() for name in names if f"def {name}(" not in tests}
    assert missing == set()
    assert all(path.startswith("devtools/") for path, _ in ON_A_GPU_ONLY), "the pipeline's CUDA lines are rehearsed"


def test_the_scan_finds_a_new_cuda_only_choice(tmp_path):
    source = tmp_path / "new.py"
    source.write_text(
        "import torch\n"
        "def batch(device):\n    return 512 if device.type == 'cuda' else 64\n"
        "class Run:\n    def pin(self, x):\n        return x.is_cuda\n"
        "def bench():\n    torch.backends.cudnn.benchmark = True\n"
        "def plain(device):\n    return device.type == 'cpu'\n"
    )
    assert cuda_conditioned(source) == {"batch", "Run.pin", "bench"}
