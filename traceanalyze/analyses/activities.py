"""GPU activities with everything the analyses share: category, GEMM precision, occupancy.

Analyses that others build on are memoised per Trace (:func:`per_trace`): a report asks for the
summary, the kernel table and the memory traffic of one trace from several places.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

import polars as pl

from traceanalyze.classify import classify, op_ids_are_rows
from traceanalyze.hardware.occupancy import theoretical_occupancy
from traceanalyze.query import IN_MEMORY
from traceanalyze.trace import Trace

R = TypeVar("R")

# Inside a CUDA graph a memory copy or set node can run as a kernel of the runtime's own
# (`memcpy128`): by its own name it is the copy or set the eager run makes with
# cudaMemcpyAsync / cudaMemsetAsync, and counts as one.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch")
GRAPH_TRANSFER_KERNELS: dict[str, str] = {"memcpy": r"^memcpy\d*$", "memset": r"^memset\d*$"}


# A GEMM whose name does not say its precision takes it from the dtype its launching op
# recorded (record_shapes: `Input type`), first input first. fp32 inputs on tensor cores are
# TF32; on the CUDA cores the name says so already.
DTYPE_PRECISION: dict[str, str] = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "tf32",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "signed char": "int8",
    "int8_t": "int8",
}
NAMELESS_PRECISION = ("tensor-core (unknown dtype)", "unknown")


def _precision_from_dtypes(gpu: pl.DataFrame, cpu: pl.DataFrame) -> pl.LazyFrame:
    """``gemm_precision`` from the launching op's recorded dtype where the name did not say
    it (the name's own precision is kept where it has one)."""
    first_type = pl.col("input_types").str.extract(r'^\[\s*"([^"]+)"', 1)
    nameless = pl.col("gemm_precision").is_in(list(NAMELESS_PRECISION))
    # Only the ops that launched such a GEMM read their types (a regex over the types of
    # every launching op cost ~1 ms of a 15 MB rank, for the handful of GEMMs that need it).
    ids = gpu.filter(nameless)["op_id"].drop_nulls().unique()
    if not ids.len():
        return gpu.lazy()  # no GEMM without a precision: the frame as it is
    if op_ids_are_rows(cpu):  # as linking makes them: a gather, not a search
        launching = cpu.select("op_id", "input_types").gather(
            ids.filter(ids.is_between(0, cpu.height - 1))
        )
    else:
        launching = cpu.filter(pl.col("op_id").is_in(ids.implode()))
    dtypes = launching.lazy().select(
        op_id="op_id", _dtype=first_type.replace_strict(DTYPE_PRECISION, default=None)
    )
    return (
        gpu.lazy()
        .join(dtypes, on="op_id", how="left", maintain_order="left")
        .with_columns(
            gemm_precision=pl.when(nameless & pl.col("_dtype").is_not_null())
            .then(pl.col("_dtype"))
            .otherwise(pl.col("gemm_precision"))
        )
        .drop("_dtype")
    )


@functools.cache  # an immutable expression; its regexes and branches took ~0.1 ms to build
def transfer_kind() -> pl.Expr:
    """``kind`` with the copy and set kernels of a replayed CUDA graph as memcpy/memset."""
    graph_kernel = (pl.col("kind") == "kernel") & pl.col("launch_api").is_in(GRAPH_LAUNCHES)
    kind = pl.col("kind")
    for transfer, pattern in GRAPH_TRANSFER_KERNELS.items():
        kind = (
            pl.when(graph_kernel & pl.col("name").str.contains(pattern))
            .then(pl.lit(transfer))
            .otherwise(kind)
        )
    return kind.alias("kind")


def per_trace(analysis: Callable[[Trace], R]) -> Callable[[Trace], R]:
    """Compute ``analysis(trace)`` once per Trace object (kept while the Trace lives).

    Results are shared: callers must not mutate them (frames are immutable anyway).
    """
    memo: weakref.WeakKeyDictionary[Trace, R] = weakref.WeakKeyDictionary()

    @functools.wraps(analysis)
    def memoised(trace: Trace) -> R:
        if trace not in memo:
            memo[trace] = analysis(trace)
        return memo[trace]

    return memoised


@per_trace
def activities(trace: Trace) -> pl.DataFrame:
    """The gpu frame plus ``category``, ``gemm_precision`` and the occupancy columns; a
    replayed graph's copy and set kernels are memcpy/memset (:func:`transfer_kind`)."""
    frame = theoretical_occupancy(classified_activities(trace), trace.devices).with_columns(
        # Occupancy is a property of kernels; copies and sets have no launch footprint.
        *(
            pl.when(pl.col("kind") == "kernel").then(pl.col(c)).alias(c)
            for c in ("theoretical_occupancy_pct", "occupancy_limiter", "achieved_occupancy_pct")
        )
    )
    return frame


@per_trace
def classified_activities(trace: Trace) -> pl.DataFrame:
    """:func:`activities` without the occupancy columns, the same rows in the same order: for
    analyses that read none of them (collectives, ``ranks``), which then skip the occupancy
    (~4 ms of a 15 MB rank's ~17 ms); :func:`activities` builds on this one, so a command
    that wants both classifies once."""
    # The precision reads no `kind`, so it can come first; one query after classify.
    classified = _precision_from_dtypes(classify(trace.gpu, trace.cpu), trace.cpu)
    transfer = pl.col("kind").is_in(list(GRAPH_TRANSFER_KERNELS))
    return (
        classified.with_columns(transfer_kind())
        .with_columns(category=pl.when(transfer).then(pl.col("kind")).otherwise(pl.col("category")))
        .collect(engine=IN_MEMORY)
    )


def in_iterations(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows that belong to an iteration (activities launched before the window have none)."""
    return frame.filter(pl.col("iteration").is_not_null())


def iteration_count(trace: Trace) -> int:
    """The divisor of per-iteration figures: iterations times ranks (one row per rank and step),
    so a multi-rank trace reports the mean per rank and iteration."""
    return max(trace.iterations.height, 1)
