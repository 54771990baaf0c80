"""`cudnn`: the CPU time ATen spends in the ops that call cuDNN.

ATen builds or looks up a cuDNN frontend graph (execution plan) inside ops such as
``aten::_cudnn_attention_forward`` with no finer record_function, so that work shows up as the
op's *self* time: its duration minus its direct children (allocations, runtime and driver
calls). In steady state that is the per-call plan lookup and argument packing; the one-off plan
build happens on the first call of a process (or of a new shape), which a trace only holds if
profiling started before it (see the cold-start analysis). So this module names the steady
figure for what it is, CPU self time, and calls nothing "planning".
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import activities, iteration_count, per_trace
from traceanalyze.analyses.cputree import with_self_time
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.step.model import step_model
from traceanalyze.trace import Trace

# CPU ops that call into cuDNN (or MIOpen, its ROCm counterpart).
# The SDPA wrapper aten::_scaled_dot_product_cudnn_attention is not one: it only dispatches.
CUDNN_OP = (
    r"^aten::(_cudnn_attention_(forward|backward)|cudnn_convolution\w*|cudnn_batch_norm\w*"
    r"|_cudnn_rnn\w*|miopen_\w+)$"
)


CUDNN_TABLE_COLUMNS = (
    "name", "calls_per_iter", "self_us_per_iter", "self_us_mean", "share_of_cpu_op_pct",
    "self_us_first_in_trace", "self_us_steady_median", "calls_total", "launch_api",
)  # fmt: skip


@per_trace
def cudnn_calls(trace: Trace) -> pl.DataFrame:
    """One row per call of a cuDNN-calling op: its self time, call index and iteration."""
    ops = trace.cpu.filter((pl.col("cat") == "cpu_op") & pl.col("name").str.contains(CUDNN_OP))
    calls = with_self_time(ops, trace.cpu)
    return calls.sort("ts_ns").with_columns(
        call_index=pl.int_range(pl.len()).over("name"),
    )


@on_counted
def cudnn_table(trace: Trace) -> pl.DataFrame:
    """Per cuDNN-calling op: calls and CPU self time per iteration, its share of the CPU
    operator time per iteration (the one total every cuDNN share is of), the first call in the
    trace against the steady median, and the launch API."""
    calls = cudnn_calls(trace)
    cpu_op_us_per_iter = step_model(trace).means["cpu_op_us_per_iter"]
    n = iteration_count(trace)
    inside = pl.col("iteration").is_not_null()
    self_us = pl.col("self_ns") / 1e3
    by_time = self_us.sort_by("ts_ns")
    table = calls.group_by("name").agg(
        calls_per_iter=inside.sum() / n,
        self_us_per_iter=self_us.filter(inside).sum() / n,
        self_us_mean=self_us.filter(inside).mean(),
        self_us_first_in_trace=by_time.first(),
        self_us_steady_median=by_time.slice(1).median(),
        calls_total=pl.len(),
    )
    share = (
        pl.col("self_us_per_iter") / cpu_op_us_per_iter * 100
        if cpu_op_us_per_iter
        else pl.lit(None, pl.Float64)
    )
    return (
        table.with_columns(share_of_cpu_op_pct=share)
        .join(_launch_apis(trace), on="name", how="left")
        .sort(["self_us_per_iter", "name"], descending=[True, False])
        .select(CUDNN_TABLE_COLUMNS)
    )


def _launch_apis(trace: Trace) -> pl.DataFrame:
    kernels = activities(trace).filter(
        (pl.col("kind") == "kernel") & pl.col("op_name").str.contains(CUDNN_OP)
    )
    return kernels.group_by(pl.col("op_name").alias("name")).agg(
        launch_api=pl.col("launch_api").drop_nulls().unique().sort()
    )


@on_counted
def cudnn_cpu_us_per_iter(trace: Trace) -> float:
    """CPU self time of the cuDNN-calling ops per iteration, in microseconds."""
    calls = cudnn_calls(trace).filter(pl.col("iteration").is_not_null())
    return float(calls["self_ns"].sum()) / 1e3 / iteration_count(trace)
