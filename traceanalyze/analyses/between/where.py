"""The report's "Where the time goes": idle causes, launch health and a verdict from them."""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyze.analyses.accounting import mean_per_iter
from traceanalyze.analyses.between.idle import IdleResult, idle_breakdown
from traceanalyze.analyses.between.launches import launch_health
from traceanalyze.load.variants import VariantSet
from traceanalyze.trace import Trace

# What the largest cause of idle time says, given the idle share of the GPU span and the
# cause's share of the idle time.
VERDICTS = {
    "host_wait": "waiting for the CPU to launch work: the CPU side (operators and "
    "launch calls) sets the pace",
    "sync": "during synchronisation calls: a synchronize, `.item()` or blocking copy "
    "inside the iteration stops the CPU from queueing work ahead",
    "launch_overhead": "short gaps between work already queued: the dispatch "
    "overhead of many small kernels (fusion or CUDA graphs remove it)",
    "other": "work queued but not started, for a reason the trace does not show "
    "(e.g. a wait on another stream's or device's event)",
}


@dataclass(frozen=True)
class WhereTimeGoes:
    label: str | None
    idle: IdleResult
    launches: dict[str, float | int]
    verdict: str


def where_time_goes(trace: Trace, label: str | None = None) -> WhereTimeGoes:
    idle = idle_breakdown(trace)
    return WhereTimeGoes(label, idle, launch_health(trace), _verdict(trace, idle))


def _verdict(trace: Trace, idle: IdleResult) -> str:
    span_us = mean_per_iter(trace, "gpu_span_us")
    if span_us <= 0:
        return "No GPU activity in the iterations: no idle time to explain."
    if idle.gpu_idle_us_per_iter <= 0:
        return "The GPU never idles between the iteration's first and last activity."
    top = idle.causes.sort("us_per_iter", descending=True).row(0, named=True)
    share = idle.gpu_idle_us_per_iter / span_us * 100
    return (
        f"The GPU is idle {share:.2g}% of its span per iteration; the largest part of that "
        f"({top['share_of_idle_pct']:.0f}%) is {top['cause']}: {VERDICTS[top['cause']]}."
    )


def where_time_goes_of(variants: VariantSet) -> tuple[WhereTimeGoes, ...]:
    """The section for a report on one trace of one rank; none for sets of traces or ranks."""
    traces = [v.trace for v in variants.loaded if v.trace is not None]
    if len(traces) != 1 or len(traces[0].meta) != 1:
        return ()
    return (where_time_goes(traces[0]),)
