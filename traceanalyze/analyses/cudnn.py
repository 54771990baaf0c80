"""`cudnn`: the CPU time ATen spends around cuDNN calls, which is mostly planning.

ATen builds or looks up a cuDNN frontend graph (execution plan) inside ops such as
``aten::_cudnn_attention_forward`` with no finer record_function, so the planning shows up as
that op's *self* time: its duration minus its direct children (allocations, runtime and driver
calls). That is the "big CPU block" of cuDNN attention.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.activities import activities, iteration_count, per_trace
from traceanalyze.analyses.cputree import with_self_time
from traceanalyze.trace import Trace

# CPU ops that call into cuDNN (or MIOpen, its ROCm counterpart).
# The SDPA wrapper aten::_scaled_dot_product_cudnn_attention is not one: it only dispatches.
CUDNN_OP = (
    r"^aten::(_cudnn_attention_(forward|backward)|cudnn_convolution\w*|cudnn_batch_norm\w*"
    r"|_cudnn_rnn\w*|miopen_\w+)$"
)


@per_trace
def cudnn_calls(trace: Trace) -> pl.DataFrame:
    """One row per call of a cuDNN-calling op: its self time, call index and iteration."""
    ops = trace.cpu.filter((pl.col("cat") == "cpu_op") & pl.col("name").str.contains(CUDNN_OP))
    calls = with_self_time(ops, trace.cpu)
    return calls.sort("ts_ns").with_columns(
        call_index=pl.int_range(pl.len()).over("name"),
    )


def cudnn_table(trace: Trace) -> pl.DataFrame:
    """Per cuDNN-calling op: calls, self time (first call vs the rest), per iteration, launch API.

    The first call in the trace pays for building the plan when it was not cached before the
    profiler started; the rest show the steady-state lookup cost.
    """
    calls = cudnn_calls(trace)
    n_iter = iteration_count(trace)
    launches = _launch_apis(trace)
    table = calls.group_by("name").agg(
        calls=pl.len(),
        self_us_total=pl.col("self_ns").sum() / 1e3,
        self_us_first_call=pl.col("self_ns").sort_by("ts_ns").first() / 1e3,
        self_us_steady=pl.col("self_ns").sort_by("ts_ns").slice(1).median() / 1e3,
        self_us_per_iter=pl.col("self_ns").filter(pl.col("iteration").is_not_null()).sum()
        / 1e3
        / n_iter,
        duration_us_mean=pl.col("dur_ns").mean() / 1e3,
        self_share_pct=pl.col("self_ns").sum() / pl.col("dur_ns").sum() * 100,
    )
    return table.join(launches, on="name", how="left").sort("self_us_total", descending=True)


def _launch_apis(trace: Trace) -> pl.DataFrame:
    kernels = activities(trace).filter(
        (pl.col("kind") == "kernel") & pl.col("op_name").str.contains(CUDNN_OP)
    )
    return kernels.group_by(pl.col("op_name").alias("name")).agg(
        launch_api=pl.col("launch_api").drop_nulls().unique().sort().str.join(", ")
    )


def planning_us_per_iter(trace: Trace) -> float:
    """Self time of cuDNN-calling ops per iteration, in microseconds."""
    calls = cudnn_calls(trace).filter(pl.col("iteration").is_not_null())
    return float(calls["self_ns"].sum()) / 1e3 / iteration_count(trace)
