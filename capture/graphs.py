"""CUDA graphs: capture one variant's forward in a ``torch.cuda.CUDAGraph`` and profile replays.

Two traces can be recorded (``CaptureConfig.cuda_graph``):

- ``replay``: the graph is captured and replayed once before profiling; the trace holds only
  replays, each a ``cudaGraphLaunch`` inside ``<region>_fwd``, on the usual profiler schedule.
- ``capture``: the trace opens with the capture itself (``ProfilerStep#1``, inside
  ``record_function("cuda_graph_capture")``: the CPU ops and their kernel launch calls, which
  run no kernel while the stream captures), then ``active`` replays (``ProfilerStep#2``...).
  An analysis can pair each replayed kernel with the launch call captured at its position.

Every kernel of one replay shares the correlation id of its ``cudaGraphLaunch``; Kineto builds
on CUPTI >= 12 also write ``graph id`` / ``graph node id`` into the kernel's args (where the
torch build's Kineto has them).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from capture.measure import Measured, grad_relative_error, median_ms, output_error, unrelated_op
from capture.tracing import record_sequence, record_trace

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from capture.config import CaptureConfig
    from capture.measure import Inputs, Step
    from capture.variants import Attention

CAPTURE_REGION = "cuda_graph_capture"
# Other threads may touch CUDA while this one captures (e.g. the allocator's or Python's
# finalisers); only this thread's calls must be capturable.
CAPTURE_ERROR_MODE = "thread_local"
METHOD = {
    "replay": "one eager warm-up call on a side stream, then the graph captured and replayed "
    "once, all before profiling; the trace holds replays only (cudaGraphLaunch inside "
    "<region>_fwd); accuracy and median_ms are of replays",
    "capture": "one eager warm-up call on a side stream before profiling; the profiler's "
    "warm-up step runs an unrelated op; ProfilerStep#1 holds the capture (inside "
    f"{CAPTURE_REGION}: the captured ops launch no kernel), ProfilerStep#2 onwards one "
    "replay each (the first may hold one-off work such as the graph's upload); accuracy and "
    "median_ms are of replays after profiling",
}


class GraphedForward:
    """A forward captured once; `replay` reruns its kernels on the same input tensors."""

    def __init__(self, fn: Attention, inputs: Inputs, region: str) -> None:
        import torch

        self._fn, self._inputs, self._region = fn, inputs, region
        self.graph = torch.cuda.CUDAGraph()
        self.out: torch.Tensor | None = None

    def warm_up(self) -> None:
        """One eager call on a side stream, as torch's CUDA graph notes ask before a capture,
        so lazy initialisation (handles, plans, compilation) happens outside the graph."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._fn(self._inputs.q, self._inputs.k, self._inputs.v)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

    def capture(self) -> None:
        """Record the forward's kernels into the graph (none of them runs now)."""
        import torch
        from torch.profiler import record_function

        with (
            record_function(CAPTURE_REGION),
            torch.cuda.graph(self.graph, capture_error_mode=CAPTURE_ERROR_MODE),
        ):
            self.out = self._fn(self._inputs.q, self._inputs.k, self._inputs.v)

    def replay(self) -> torch.Tensor:
        """One replay, inside ``<region>_fwd``; returns the graph's (static) output."""
        from torch.profiler import record_function

        if self.out is None:
            raise RuntimeError("replay before capture")
        with record_function(f"{self._region}_fwd"):
            self.graph.replay()
        return self.out


def measure_graphed(
    fn: Attention, region: str, config: CaptureConfig, inputs: Inputs, path: Path
) -> Measured:
    """Warm up, capture and replay ``fn`` as ``config.cuda_graph`` says; write the trace."""
    settle = partial(unrelated_op, config.device)
    graphed = GraphedForward(fn, inputs, region)
    graphed.warm_up()
    if config.cuda_graph == "replay":
        graphed.capture()
        error = output_error(graphed.replay(), inputs)  # the untimed first replay
        median = median_ms(graphed.replay, config.repeats, config.device)
        op_names = record_trace(graphed.replay, config, path)
    else:
        replays: list[Step] = [graphed.replay] * config.active
        op_names = record_sequence([graphed.capture, *replays], settle, config, path)
        error = output_error(graphed.replay(), inputs)
        median = median_ms(graphed.replay, config.repeats, config.device)
    return Measured(error, grad_relative_error(inputs), median, op_names)
