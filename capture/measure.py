"""Inputs, the float64 reference, the step that is profiled, and its timing."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capture.variants import naive_attention

if TYPE_CHECKING:
    import torch

    from capture.config import CaptureConfig
    from capture.variants import Attention

Step = Callable[[], "torch.Tensor"]


@dataclass(frozen=True)
class Inputs:
    """q, k, v (and the upstream gradient) shared by every variant, with float64 answers."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad_out: torch.Tensor | None
    expected_out: torch.Tensor
    expected_grads: tuple[torch.Tensor, ...]


def make_inputs(config: CaptureConfig) -> Inputs:
    """Seeded random inputs in ``config.dtype`` and the float64 naive reference on them."""
    import torch

    device = torch.device(config.device)
    dtype = getattr(torch, config.dtype)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    shape = (config.batch, config.heads, config.seq, config.head_dim)

    def randn() -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    q, k, v = (randn().requires_grad_(config.backward) for _ in range(3))
    grad_out = randn() if config.backward else None
    with torch.set_grad_enabled(config.backward):
        exact = [t.detach().double().requires_grad_(config.backward) for t in (q, k, v)]
        expected_out = naive_attention(config, device)(*exact)
        if grad_out is not None:
            expected_out.backward(grad_out.double())
    grads = tuple(t.grad for t in exact if t.grad is not None)
    return Inputs(q, k, v, grad_out, expected_out.detach(), grads)


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
    import torch

    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return float(statistics.median(start.elapsed_time(end) for start, end in events))


def _wall_ms(step: Step) -> float:
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) * 1000.0
