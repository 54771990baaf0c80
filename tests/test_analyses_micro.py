"""Analyses, diff-test style: a handful of events as a tiny Kineto trace, and the exact result.

Times in the events are microseconds, as Kineto writes them (see tests/micro.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.micro import annotation, call, kernel, load, op, present
from traceanalyze.analyses.accounting import busy_and_span, busy_segments
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.report import expectations as expect
from traceanalyze.analyses.summary import summary
from traceanalyze.classify import CATEGORIES
from traceanalyze.render.report.variant_findings import memory_findings

Event = dict[str, Any]
SGEMM = "ampere_sgemm_128x64_nn"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(Flash_fwd_params)"
CUDNN_SDPA = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64"
CONVERT_DQ = "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)"
DTOD = "Memcpy DtoD (Device -> Device)"
MEMSET = "Memset (Device)"

# Every category, none with time: a summary lists each (the same keys on every trace).
CATEGORIES_ZERO = dict.fromkeys(CATEGORIES, 0.0)


def memcpy(name: str, ts: float, dur: float, correlation: int, nbytes: int, **kw: Any) -> Event:
    return kernel(name, ts, dur, correlation, cat="gpu_memcpy", bytes=nbytes, **kw)


def memset(ts: float, dur: float, correlation: int, **kw: Any) -> Event:
    return kernel(MEMSET, ts, dur, correlation, cat="gpu_memset", bytes=4, **kw)


def footprint(registers: int, threads: int, shared: int, achieved: float) -> dict[str, Any]:
    """Kernel args as Kineto names them."""
    return {
        "registers per thread": registers,
        "shared memory": shared,
        "block": [threads, 1, 1],
        "grid": [132, 1, 1],
        "est. achieved occupancy %": achieved,
    }


# ---------------------------------------------------------------------------------------------
# summary

# Two profiler steps of 100 us. One kernel runs inside step 1 but was launched before the
# profiling window (no runtime call): it must not count. Step 1: a GEMM, a DtoD copy, a memset and
# three views (aten::t holds an aten::transpose: one view). Step 2: a GEMM on stream 7 and a
# softmax on stream 8 launched through the driver API, overlapping by 5 us.
SUMMARY_EVENTS: list[Event] = [
    annotation("ProfilerStep#1", 100, 100),
    annotation("ProfilerStep#2", 200, 100),
    kernel("pre_window_kernel", 101, 3, 99),
    op("aten::mm", 110, 20),
    call("cudaLaunchKernel", 112, 5, 1),
    kernel(SGEMM, 150, 10, 1),
    op("aten::transpose", 131, 2),
    op("aten::t", 134, 4),
    op("aten::transpose", 135, 2),
    op("aten::copy_", 140, 10),
    call("cudaMemcpyAsync", 141, 3, 2),
    memcpy(DTOD, 165, 6, 2, 1024),
    op("aten::zero_", 152, 5),
    call("cudaMemsetAsync", 153, 2, 3),
    memset(172, 1, 3),
    op("aten::mm", 210, 20),
    call("cudaLaunchKernel", 212, 5, 4),
    kernel(SGEMM, 240, 10, 4),
    op("aten::_softmax", 232, 10),
    call("cuLaunchKernelEx", 233, 4, 5, cat="cuda_driver"),
    kernel(SOFTMAX, 245, 8, 5, stream=8),
]


def test_summary(tmp_path: Path) -> None:
    result = summary(load(tmp_path, SUMMARY_EVENTS))
    assert result == {
        "iterations": 2,
        "ranks": 1,
        "iteration_source": "ProfilerStep",
        "iteration_note": None,
        "iterations_left_out": 0,
        # 35 of the 38 µs of GPU activity: the pre-window kernel (3 µs) is in no iteration.
        "iteration_coverage_pct": 35 / 38 * 100,
        "kernels_per_iter": 1.5,  # 3 kernels in 2 steps; the pre-window kernel is not counted
        "memcpy_per_iter": 0.5,
        "memset_per_iter": 0.5,
        # Step 1: 10 + 6 + 1; step 2: 10 + 8.
        "gpu_activity_us_per_iter": 17.5,
        "gpu_kernel_us_per_iter": 14.0,
        "gpu_memcpy_us_per_iter": 3.0,
        "gpu_memset_us_per_iter": 0.5,
        # The windows are the steps (their CPU side is the longer). Busy in them: 17 of step
        # 1's own work and the pre-window kernel's 3 (carried in); [240, 250] | [245, 253] = 13
        # in step 2, less than its activity time, since the two streams overlap.
        "gpu_busy_us_per_iter": 16.5,
        "gpu_span_us_per_iter": 18.0,  # [150, 173] and [240, 253]
        "gpu_idle_us_per_iter": 83.5,  # 100 - 20 and 100 - 13
        # Outermost ops: 20 + 2 + 4 + 10 + 5 and 20 + 10; the aten::transpose inside aten::t is
        # not added again.
        "cpu_op_us_per_iter": 35.5,
        "launch_us_per_iter": 9.5,  # (5 + 3 + 2) and (5 + 4)
        "cpu_span_us_per_iter": 100.0,
        "wall_us_per_iter": 100.0,  # the CPU side is longer in both steps
        "compute_us_per_iter": 13.0,  # 3 + 10 and 13
        "communication_us_per_iter": 0.0,
        "exposed_communication_us_per_iter": 0.0,
        "exposed_copy_us_per_iter": 3.5,  # the copy and the set, 7 us in step 1
        "carried_in_us_per_iter": 1.5,  # the pre-window kernel, 3 us in step 1
        # Step 1: [100, 101] before the pre-window kernel and [160, 165], [171, 172] before the
        # copy and the set, launched long before (queued); [104, 150] before the GEMM launched
        # at 112-117: 8 us host, 5 in the launch call, 33 after it returned (queued: the GPU
        # had the work); [173, 200] to the step's end (host). Step 2: [200, 240] (12 host, 5
        # launch call, 23 after it returned: queued) and [253, 300] after its last work (host).
        "idle_us_by_cause": {
            "queued": 46.5,
            "sync": 0.0,
            "data_loading": 0.0,
            "host": 37.0,
            "launch": 0.0,
            # The launch calls last 2 to 5 us, far below the 1 ms of a one-off call.
            "launch_first_call": 0.0,
        },
        # Step 1 against step 2 (more than 5% of the median apart); wall times are equal.
        "spread_per_iter": {
            "kernels_min": 1.0,
            "kernels_median": 1.5,
            "kernels_max": 2.0,
            "gpu_busy_us_min": 13.0,
            "gpu_busy_us_median": 16.5,
            "gpu_busy_us_max": 20.0,
            "gpu_idle_us_min": 80.0,
            "gpu_idle_us_median": 83.5,
            "gpu_idle_us_max": 87.0,
            "cpu_op_us_min": 30.0,
            "cpu_op_us_median": 35.5,
            "cpu_op_us_max": 41.0,
            # Every key on every trace: null where the steps agree within 5%.
            "wall_us_min": None,
            "wall_us_median": None,
            "wall_us_max": None,
        },
        "wall_source": "the trace's step windows",
        "gpu_busy_pct_of_wall": 16.5,
        # Step 1 waits on queued work for 46 of its 100 us (host 27): its own verdict is cannot
        # tell; step 2 is CPU-bound (host 47, waiting 40, GPU 13). Each holds half the wall.
        "bound": "cannot tell",
        "bound_margin_pct": None,
        "bound_note": "the steps disagree (1 CPU-bound, 1 cannot tell of 2 counted; the "
        "largest holds 50% of their wall time, a verdict needs two thirds and their mean to "
        "agree); over all of them: GPU 20.0% (compute 13.0%, copies 3.5%, dispatch gaps 3.5%), "
        "CPU 37.0% (host 37.0%), waiting on queued work 43.0% of the wall; 1.5 µs per step (1.5% "
        "of the wall) of GPU work launched before the step ran in its window (carried in)",
        "transpose_ops_per_iter": 1.0,  # transpose and t in step 1
        "graph_launches_per_iter": 0.0,
        "cudnn_cpu_us_per_iter": 0.0,
        # Every activity kind, adding up to gpu_activity_us_per_iter.
        "category_us": CATEGORIES_ZERO
        | {"gemm": 10.0, "softmax": 4.0, "memcpy": 3.0, "memset": 0.5},
        "category_count": CATEGORIES_ZERO
        | {"gemm": 1.0, "memcpy": 0.5, "memset": 0.5, "softmax": 0.5},
        "launch_apis": {
            "cudaLaunchKernel": 1.0,
            "cuLaunchKernelEx": 0.5,
            "cudaMemcpyAsync": 0.5,
            "cudaMemsetAsync": 0.5,
        },
        # The pre-window kernel has no launch call in the trace: not launched outside the steps.
        "gpu_activities_outside_iterations_total": 0,
        "gpu_activities_without_launch_total": 1,
        "cpu_ops_outside_iterations_total": 0,
    }
    assert sum(result["category_us"].values()) == result["gpu_activity_us_per_iter"]


def test_summary_gpu_bound_and_busy_time_per_device(tmp_path: Path) -> None:
    # One step; two devices each busy ~34 us, overlapping in time: the step model takes a rank's
    # GPUs together (busy when any runs: [5, 39]); the own-work span is per device, summed; the
    # wall time is the CPU span, the longer side.
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#7", 0, 40),
            op("aten::mm", 10, 4),
            call("cudaLaunchKernel", 11, 2, 1),
            call("cudaLaunchKernel", 12, 1, 2),
            kernel(SGEMM, 5, 34, 1, device=0),
            kernel(SGEMM, 6, 33, 2, device=1),
        ],
    )
    result = summary(trace)
    assert (result["gpu_busy_us_per_iter"], result["cpu_op_us_per_iter"]) == (34.0, 4.0)
    assert (result["wall_us_per_iter"], result["gpu_span_us_per_iter"]) == (40.0, 67.0)
    assert result["bound"] == "cannot tell"  # one step only
    assert "GPU-bound by" in result["bound_note"]


def test_busy_time_is_the_union_of_intervals_per_group() -> None:
    frame = pl.DataFrame(
        {
            "device": [0, 0, 0, 0, 1],
            "ts_ns": [0, 5, 20, 22, 0],
            "dur_ns": [10, 10, 1, 5, 3],  # [0,10] | [5,15] -> 15; [20,21]; [22,27]
        }
    )
    result = busy_and_span(frame, ["device"]).sort("device")
    assert result.rows() == [(0, 21, 27), (1, 3, 3)]


def _busy_by_segments(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The definition: the union's disjoint segments, summed per group."""
    return (
        busy_segments(frame, by)
        .group_by(by)
        .agg(
            busy_ns=(pl.col("end") - pl.col("start")).sum(),
            span_ns=pl.col("end").max() - pl.col("start").min(),
        )
    )


@pytest.mark.parametrize("seed", range(20))
def test_busy_time_by_coverage_equals_the_union_of_segments(seed: int) -> None:
    # Random intervals with ties of start, zero durations, nested and touching intervals, in
    # any row order; the rows' coverage sum (proper intervals) must equal the segments' sum.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    frame = pl.DataFrame(
        {
            "device": rng.integers(0, 3, n),
            "stream": rng.integers(0, 2, n),
            "ts_ns": rng.integers(0, 60, n) * int(rng.integers(1, 50)),
            "dur_ns": rng.integers(0, 80, n),
        }
    )
    for by in (["device"], ["device", "stream"]):
        expected = _busy_by_segments(frame, by).sort(by)
        assert_frame_equal(busy_and_span(frame, by).sort(by), expected)


def test_busy_time_of_improper_intervals_follows_the_segments() -> None:
    # A negative duration or a missing one: the segments' definition, whatever it gives.
    frame = pl.DataFrame(
        {"device": [0, 0, 0, 1], "ts_ns": [0, 5, 30, 0], "dur_ns": [10, -3, None, 4]}
    )
    expected = _busy_by_segments(frame, ["device"]).sort("device")
    assert_frame_equal(busy_and_span(frame, ["device"]).sort("device"), expected)


def test_summary_without_iterations_is_one_whole_trace_iteration(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [op("aten::mm", 0, 10), call("cudaLaunchKernel", 1, 2, 1), kernel(SGEMM, 5, 20, 1)],
    )
    result = summary(trace)
    assert (result["iterations"], result["iteration_source"]) == (1, "whole trace")
    assert (result["kernels_per_iter"], result["gpu_kernel_us_per_iter"]) == (1.0, 20.0)


# ---------------------------------------------------------------------------------------------
# cuDNN planning: self time = duration minus direct children (ops and runtime/driver calls)


def cudnn_call(ts: float, dur: float, correlation: int, launch_at: float) -> list[Event]:
    """aten::_cudnn_attention_forward (inside SDPA) with an allocation and a driver launch."""
    return [
        op("aten::scaled_dot_product_attention", ts - 2, dur + 4),
        op("aten::_cudnn_attention_forward", ts, dur),
        op("aten::empty", ts + 2, 5),
        call("cudaMalloc", ts + 3, 3, correlation + 1000),  # a grandchild: not subtracted twice
        call("cuLaunchKernelEx", launch_at, 4, correlation, cat="cuda_driver"),
        kernel(CUDNN_SDPA, launch_at + 10, 20, correlation),
    ]


def test_cudnn_self_time_first_call_and_steady(tmp_path: Path) -> None:
    # The first call (plan building) runs before the profiler steps; two steady calls inside.
    trace = load(
        tmp_path,
        [
            *cudnn_call(10, 100, 1, 90),  # self 100 - 5 - 4 = 91
            annotation("ProfilerStep#1", 180, 100),
            *cudnn_call(200, 40, 2, 230),  # self 31
            annotation("ProfilerStep#2", 280, 100),
            *cudnn_call(300, 30, 3, 320),  # self 21
        ],
    )
    table = cudnn_table(trace)
    want = pl.DataFrame(
        {
            "name": ["aten::_cudnn_attention_forward"],
            "calls_per_iter": [1.0],  # the two calls inside the steps
            "self_us_per_iter": [26.0],  # (31 + 21) / 2 steps
            "self_us_mean": [26.0],
            # Of the CPU operator time per iteration: the SDPA calls (44 + 34) / 2 = 39.
            "share_of_cpu_op_pct": [26 / 39 * 100],
            "self_us_first_in_trace": [91.0],
            "self_us_steady_median": [26.0],  # median of 31 and 21
            "calls_total": pl.Series([3], dtype=pl.UInt32),
            "launch_api": [["cuLaunchKernelEx"]],
        }
    )
    assert_frame_equal(table, want)
    result = summary(trace)
    assert result["cudnn_cpu_us_per_iter"] == 26.0
    assert result["launch_apis"] == {"cuLaunchKernelEx": 1.0}
    assert present(result["category_us"]) == {"fused_attention": 20.0}


# ---------------------------------------------------------------------------------------------
# memcpy: the op chain that caused each copy, and the advice it earns


def clone_chain(top: str, ts: float, correlation: int) -> list[Event]:
    """``top -> aten::clone -> aten::copy_ -> Memcpy DtoD``, as out-of-place ops record it."""
    return [
        op(top, ts, 50),
        op("aten::clone", ts + 2, 40),
        op("aten::empty_like", ts + 3, 2),
        op("aten::copy_", ts + 10, 30),
        call("cudaMemcpyAsync", ts + 12, 5, correlation),
        memcpy(DTOD, ts + 20, 10, correlation, 2**20),
    ]


MASKED_FILL_ADVICE = (
    "out-of-place `masked_fill` clones its input first; use `masked_fill_` where the input may "
    "be overwritten"
)


def test_memcpy_chains_and_advice(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            *clone_chain("aten::masked_fill", 0, 1),
            op("aten::masked_fill_", 45, 4),  # the in-place op masked_fill runs: no copy
            call("cudaLaunchKernel", 46, 2, 2),
            kernel("masked_fill_kernel", 60, 5, 2),
            # The same chain from ops with no in-place twin does not get the masked_fill advice.
            *clone_chain("aten::masked_fill_", 100, 3),
            *clone_chain("aten::contiguous", 200, 4),
            op("aten::bmm", 300, 10),
            call("cudaMemsetAsync", 301, 2, 5),
            memset(320, 1, 5),
            op("aten::to", 400, 10),
            call("cudaMemcpyAsync", 401, 5, 6),
            memcpy("Memcpy HtoD (Pageable -> Device)", 420, 30, 6, 512),
            # autograd's backward of masked_fill_ runs an out-of-place masked_fill on the
            # gradient: a copy the user's code did not write, so no advice to change it.
            op("autograd::engine::evaluate_function: MaskedFillBackward0", 500, 60),
            op("MaskedFillBackward0", 501, 58),
            *clone_chain("aten::masked_fill", 502, 7),
        ],
    )
    table = memory_traffic(trace).sort("chain")
    want = pl.DataFrame(
        {
            "chain": [
                "aten::bmm -> Memset (Device)",
                f"aten::contiguous -> aten::clone -> aten::copy_ -> {DTOD}",
                f"aten::masked_fill -> aten::clone -> aten::copy_ -> {DTOD}",
                f"aten::masked_fill_ -> aten::clone -> aten::copy_ -> {DTOD}",
                "aten::to -> Memcpy HtoD (Pageable -> Device)",
                "autograd::engine::evaluate_function: MaskedFillBackward0 -> MaskedFillBackward0"
                f" -> aten::masked_fill -> aten::clone -> aten::copy_ -> {DTOD}",
            ],
            "count_per_iter": [1.0] * 6,
            "us_per_iter": [1.0, 10.0, 10.0, 10.0, 30.0, 10.0],
            "bytes_per_call": [4.0, 2.0**20, 2.0**20, 2.0**20, 512.0, 2.0**20],
            # bytes per ns is GB/s: 4 B in 1 us, 1 MiB in 10 us, 512 B in 30 us
            "bandwidth_gbps": [
                0.004,
                2**20 / 10_000,
                2**20 / 10_000,
                2**20 / 10_000,
                512 / 30_000,
                2**20 / 10_000,
            ],
            "launch_op": [
                "aten::bmm",
                "aten::copy_",
                "aten::copy_",
                "aten::copy_",
                "aten::to",
                "aten::copy_",
            ],
            "actionable": [False, True, True, False, True, False],  # no cause known: no fix
            "advice": [
                "cuBLAS zeroes a workspace or split-K accumulator; small and expected",
                "a non-contiguous (transposed or permuted) tensor is materialised by "
                "`.contiguous()`",
                MASKED_FILL_ADVICE,
                "device-to-device copy",
                "host-to-device copy inside the measured region; move data that does not change "
                "to the GPU once; for new data each step, copy from pinned memory with "
                "non_blocking=True",
                "made by autograd's backward formula of an op, not by your code; it goes away "
                "only with a different op or a custom backward",
            ],
        }
    )
    assert_frame_equal(table.select(want.columns), want)
    sentences = memory_findings(memory_traffic(trace))
    assert (
        f"aten::masked_fill -> aten::clone -> aten::copy_ -> {DTOD}: 1 per iteration (10 µs), "
        f"1 MiB each; {MASKED_FILL_ADVICE}." in sentences
    )
    assert not [s for s in sentences if "Backward" in s]


def test_memcpy_in_place_has_no_traffic(tmp_path: Path) -> None:
    trace = load(
        tmp_path,
        [
            op("aten::masked_fill_", 0, 4),
            call("cudaLaunchKernel", 1, 2, 1),
            kernel("masked_fill_kernel", 10, 5, 1),
        ],
    )
    assert memory_traffic(trace).is_empty()
    assert memory_findings(memory_traffic(trace)) == []


# ---------------------------------------------------------------------------------------------
# kernel table: aggregation, occupancy (theoretical from the footprint; achieved 0 -> null)


def test_kernel_table_aggregation_and_occupancy(tmp_path: Path) -> None:
    # The flash forward footprint on an H200 (255 registers, 128 threads, 64 KiB): 12.5%.
    flash = footprint(255, 128, 65536, 0)
    trace = load(
        tmp_path,
        [
            annotation("ProfilerStep#1", 0, 1000),
            op("aten::_flash_attention_forward", 10, 300),
            call("cudaLaunchKernel", 11, 2, 1),
            call("cudaLaunchKernel", 12, 2, 2),
            call("cudaLaunchKernel", 13, 2, 3),
            kernel(FLASH, 100, 10, 1, **{**flash, "est. achieved occupancy %": 50}),
            kernel(FLASH, 200, 20, 2, **flash),  # Kineto's 0 means "no estimate"
            kernel(FLASH, 300, 30, 3, **{**flash, "est. achieved occupancy %": 25}),
            op("aten::mm", 400, 10),
            call("cudaLaunchKernel", 401, 2, 4),
            kernel(SGEMM, 500, 5, 4, **footprint(128, 256, 0, 0)),
            op("aten::copy_", 600, 10),
            call("cudaMemcpyAsync", 601, 2, 5),
            memcpy(DTOD, 700, 15, 5, 4096),
            # Launched before the window (no call): counted in the whole-trace columns only.
            kernel(SGEMM, 900, 50, 99, **footprint(128, 256, 0, 0)),
        ],
    )
    table = kernel_table(trace)
    want = pl.DataFrame(
        {
            "name": [FLASH, DTOD, SGEMM],
            "category": ["fused_attention", "memcpy", "gemm"],
            "count_per_iter": [3.0, 1.0, 1.0],
            "us_per_iter": [60.0, 15.0, 5.0],
            # Over the launches inside the iterations: count_per_iter * mean_us == us_per_iter.
            "mean_us": [20.0, 15.0, 5.0],
            "min_us": [10.0, 15.0, 5.0],
            "max_us": [30.0, 15.0, 5.0],
            "share_of_gpu_activity_pct": [75.0, 18.75, 6.25],
            "count": pl.Series([3, 1, 2], dtype=pl.UInt32),  # whole trace
            "total_us": [60.0, 15.0, 55.0],
            # 128 registers x 256 threads: 4 warps of each sub-partition's 16384 registers.
            "theoretical_occupancy_pct": [12.5, None, 25.0],
            "occupancy_limiter": ["registers", None, "registers"],
            # (50 * 10 + 25 * 30) / 40: the launch reported as 0 carries no weight.
            "achieved_occupancy_pct": [31.25, None, None],
            "launch_op": ["aten::_flash_attention_forward", "aten::copy_", "aten::mm"],
            "launch_api": ["cudaLaunchKernel", "cudaMemcpyAsync", "cudaLaunchKernel"],
            "gemm_precision": [None, None, "fp32-cuda-cores"],
        }
    )
    assert_frame_equal(table.select(want.columns), want)


def test_kernel_table_category_from_linked_launches(tmp_path: Path) -> None:
    # Launched once before the window (name only: "copy") and twice under cuDNN attention
    # backward (fused_attention). The row takes the linked launches' category.
    trace = load(
        tmp_path,
        [
            kernel(CONVERT_DQ, 1, 2, 100),
            op("aten::_cudnn_attention_backward", 10, 50),
            call("cuLaunchKernelEx", 11, 2, 1, cat="cuda_driver"),
            call("cuLaunchKernelEx", 14, 2, 2, cat="cuda_driver"),
            kernel(CONVERT_DQ, 20, 2, 1),
            kernel(CONVERT_DQ, 30, 2, 2),
        ],
    )
    table = kernel_table(trace)
    assert table.select("name", "category", "count").rows() == [(CONVERT_DQ, "fused_attention", 3)]


# ---------------------------------------------------------------------------------------------
# expectations: METRIC OP NUMBER, checked against a summary

SUMMARY = {
    "iterations": 3,
    "kernels_per_iter": 1.0,
    "memcpy_per_iter": 0.0,
    "gpu_kernel_us_per_iter": 94.72,
    "bound": "GPU-bound",
    "category_count": {"fused_attention": 1.0},
    "category_us": {"fused_attention": 94.72},
    "launch_apis": {"cudaLaunchKernel": 1.0},
}


@pytest.mark.parametrize(
    ("text", "measured", "held"),
    [
        ("kernels_per_iter == 1", 1.0, True),
        ("kernels_per_iter != 1", 1.0, False),
        ("kernels_per_iter <= 1", 1.0, True),
        ("kernels_per_iter >= 2", 1.0, False),
        ("kernels_per_iter < 1", 1.0, False),
        ("gpu_kernel_us_per_iter > 90.5", 94.72, True),
        ("memcpy_per_iter==0", 0.0, True),
        ("iterations == 3", 3.0, True),
        ("category:fused_attention == 1", 1.0, True),
        ("category:softmax == 0", 0.0, True),  # a category absent from the trace counts 0
        ("category_us:fused_attention < 1e2", 94.72, True),
        ("launch_api:cuLaunchKernelEx >= 1", 0.0, False),
    ],
)
def test_expectation_check(text: str, measured: float, held: bool) -> None:
    result = expect.check([expect.parse(text)], SUMMARY)
    assert result.rows() == [(str(expect.parse(text)), measured, held)]


def test_expectation_parse() -> None:
    assert expect.parse("  kernels_per_iter<=1.5 ") == expect.Expectation(
        "kernels_per_iter", "<=", 1.5
    )
    assert str(expect.parse("category:softmax == 0")) == "category:softmax == 0"
    assert expect.parse("x > -2.5e-3").value == -2.5e-3


@pytest.mark.parametrize(
    "text", ["kernels_per_iter", "kernels_per_iter = 1", "== 1", "k == one", "k == 1.2.3", "k == ."]
)
def test_expectation_bad_syntax(text: str) -> None:
    with pytest.raises(expect.ExpectationError, match="cannot read the expectation") as info:
        expect.parse(text)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("metric", ["kernels_per_itr", "category_count", "foo:bar"])
def test_expectation_unknown_metric(metric: str) -> None:
    with pytest.raises(expect.ExpectationError, match=f"unknown metric '{metric}'") as info:
        expect.check([expect.parse(f"{metric} == 1")], SUMMARY)
    assert "kernels_per_iter" in str(info.value)  # the message lists the metrics there are
    assert info.value.exit_code == 2


def test_expectation_on_a_text_key() -> None:
    # Issue 19: a text key offered as a metric was compared as a float (a traceback).
    with pytest.raises(expect.ExpectationError, match="'bound' is not a number") as info:
        expect.check([expect.parse("bound == 1")], SUMMARY)
    assert "bound" not in str(info.value).split("Use one of:")[1]
    assert info.value.exit_code == 2


def test_expectations_file(tmp_path: Path) -> None:
    path = tmp_path / "expect.txt"
    path.write_text("# flash\nkernels_per_iter <= 1  # one fused kernel\n\ncategory:softmax == 0\n")
    assert [str(e) for e in expect.read_file(path)] == [
        "kernels_per_iter <= 1",
        "category:softmax == 0",
    ]
    with pytest.raises(expect.ExpectationError, match="cannot read the expectations file"):
        expect.read_file(tmp_path / "missing.txt")
