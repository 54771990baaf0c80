"""Record one variant's Chrome trace with torch.profiler, and read which SDPA backend ran."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from capture.errors import CaptureError

if TYPE_CHECKING:
    from capture.config import CaptureConfig
    from capture.measure import Step

# The ATen op each SDPA backend dispatches to (the forward op; backward ops add "_backward").
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash_cpu",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "aten::_scaled_dot_product_attention_math": "math",
}
BACKEND_SOURCE = "the aten::_scaled_dot_product_* op recorded in this variant's trace"


def record_trace(step: Step, config: CaptureConfig, path: Path) -> frozenset[str]:
    """Run ``config.steps`` profiler steps of ``step`` and export the active window to ``path``
    (gzip when it ends in .gz). Returns the names of the recorded CPU events."""
    steps = [step] * config.steps
    return _profile(steps, (config.wait, config.warmup, config.active), config, path)


def record_sequence(
    steps: Sequence[Callable[[], object]],
    settle: Callable[[], object],
    config: CaptureConfig,
    path: Path,
) -> frozenset[str]:
    """Profile each of ``steps`` once, every one of them in the trace (``ProfilerStep#1``
    holds ``steps[0]``). The profiler's one warm-up step runs ``settle``, an op unrelated to the
    steps, so the profiler's own start-up is not charged to the first step."""
    return _profile([settle, *steps], (0, 1, len(steps)), config, path)


def _profile(
    steps: Sequence[Callable[[], object]],
    window: tuple[int, int, int],
    config: CaptureConfig,
    path: Path,
) -> frozenset[str]:
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if config.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    recorded: list[frozenset[str]] = []

    def save(prof: profile) -> None:
        prof.export_chrome_trace(str(path))
        recorded.append(frozenset(event.name for event in prof.events()))

    wait, warmup, active = window
    with profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=save,
        record_shapes=config.record_shapes,
        with_stack=config.with_stack,
        profile_memory=config.profile_memory,
    ) as prof:
        for step in steps:
            step()
            prof.step()
    if not recorded:
        raise CaptureError(f"{path}: the profiler exported no trace; check the schedule")
    return recorded[0]


def sdpa_backend(op_names: frozenset[str]) -> str | None:
    """The backend whose ATen op appears among ``op_names`` ("mixed: ..." if several do)."""
    found = sorted({backend for op, backend in SDPA_BACKEND_OPS.items() if op in op_names})
    if not found:
        return None
    return found[0] if len(found) == 1 else "mixed: " + ", ".join(found)
