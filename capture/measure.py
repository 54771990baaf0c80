"""Inputs, the float64 reference, the step that is profiled, and its timing."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capture.errors import CaptureError
from capture.variants import naive_attention

if TYPE_CHECKING:
    import torch

    from capture.config import CaptureConfig
    from capture.variants import Attention

Step = Callable[[], "torch.Tensor"]
# Makes the CUDA context (and wakes the profiler up) without touching any attention library.
UNRELATED_OP = "torch.zeros(1, device=device) then torch.cuda.synchronize()"


@dataclass(frozen=True)
class Inputs:
    """q, k, v (and the upstream gradient) shared by every variant, with float64 answers once
    `with_reference` computed them."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad_out: torch.Tensor | None
    expected_out: torch.Tensor | None = None
    expected_grads: tuple[torch.Tensor, ...] = ()


@dataclass(frozen=True)
class Measured:
    """What one variant's measurement found (the run turns it into a `VariantResult`)."""

    relative_error: float | None
    grad_relative_error: float | None
    median_ms: float
    op_names: frozenset[str]


def make_inputs(config: CaptureConfig) -> Inputs:
    """Seeded random inputs in ``config.dtype`` and the float64 naive reference on them."""
    return with_reference(config, random_inputs(config))


def random_inputs(config: CaptureConfig) -> Inputs:
    """Seeded random q, k, v (and upstream gradient) in ``config.dtype``, no reference yet."""
    import torch

    device = torch.device(config.device)
    dtype = getattr(torch, config.dtype)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    shape = (config.batch, config.heads, config.seq, config.head_dim)

    def randn() -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    q, k, v = (randn().requires_grad_(config.backward) for _ in range(3))
    grad_out = randn() if config.backward else None
    return Inputs(q, k, v, grad_out)


def with_reference(config: CaptureConfig, inputs: Inputs) -> Inputs:
    """``inputs`` with the float64 naive attention (and its gradients) computed on them."""
    import torch

    device = torch.device(config.device)
    with torch.set_grad_enabled(config.backward):
        exact = [
            t.detach().double().requires_grad_(config.backward)
            for t in (inputs.q, inputs.k, inputs.v)
        ]
        expected_out = naive_attention(config.attention_spec(), device)(*exact)
        if inputs.grad_out is not None:
            expected_out.backward(inputs.grad_out.double())
    grads = tuple(t.grad for t in exact if t.grad is not None)
    return dataclasses.replace(inputs, expected_out=expected_out.detach(), expected_grads=grads)


def make_step(fn: Attention, inputs: Inputs, region: str) -> Step:
    """One profiler step: the forward in ``<region>_fwd``, plus the backward in ``<region>_bwd``
    when ``inputs`` carry an upstream gradient."""
    from torch.profiler import record_function

    q, k, v, grad_out = inputs.q, inputs.k, inputs.v, inputs.grad_out

    def forward() -> torch.Tensor:
        with record_function(f"{region}_fwd"):
            return fn(q, k, v)

    def forward_backward() -> torch.Tensor:
        q.grad = k.grad = v.grad = None
        out = forward()
        with record_function(f"{region}_bwd"):
            out.backward(grad_out)
        return out

    return forward if grad_out is None else forward_backward


def output_error(actual: torch.Tensor, inputs: Inputs) -> float | None:
    """`relative_error` of a variant's output against the reference held by ``inputs``."""
    if inputs.expected_out is None:
        raise CaptureError("no float64 reference was computed for these inputs")
    return relative_error(actual, inputs.expected_out)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float | None:
    """||actual - expected|| / ||expected|| in float64; None when not finite."""
    error = float((actual.detach().double() - expected).norm() / expected.norm())
    return error if math.isfinite(error) else None


def grad_relative_error(inputs: Inputs) -> float | None:
    """The worst relative error of dq, dk, dv (None without a backward pass)."""
    if not inputs.expected_grads:
        return None
    errors = [
        relative_error(t.grad, expected) if t.grad is not None else None
        for t, expected in zip((inputs.q, inputs.k, inputs.v), inputs.expected_grads, strict=True)
    ]
    return None if None in errors else max(e for e in errors if e is not None)


def median_ms(step: Step, repeats: int, device: str) -> float:
    """Median milliseconds of ``step`` over ``repeats`` calls: CUDA events on the GPU (recorded
    back to back, one synchronize at the end), ``perf_counter`` on the CPU."""
    if device != "cuda":
        return statistics.median(_wall_ms(step) for _ in range(repeats))
    return statistics.median(event_ms(step, repeats))


def event_ms(step: Callable[[], object], calls: int) -> list[float]:
    """Milliseconds of each of ``calls`` calls of ``step`` between two CUDA events, the events
    recorded back to back and one synchronize at the end (no host wait between calls)."""
    import torch

    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(calls)
    ]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [float(start.elapsed_time(end)) for start, end in events]


def synced_wall_ms(step: Callable[[], object], device: str) -> float:
    """Wall-clock milliseconds of one call of ``step``, with a synchronize before and after
    (on the GPU), so the figure holds everything the call made the device do."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return (time.perf_counter() - start) * 1000.0


def synchronize(device: str) -> None:
    """Wait for the GPU (nothing to wait for on the CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def unrelated_op(device: str) -> None:
    """A tiny op that has nothing to do with attention (see `UNRELATED_OP`)."""
    import torch

    torch.zeros(1, device=device)
    synchronize(device)


def _wall_ms(step: Step) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000.0
