"""Every table's declared schema: its columns in order, each with its dtype (the unit is read
from the name: :mod:`traceanalyze.tables.units`). First drafted from what the commands wrote
over the sample, public and corpus traces (``scripts/table_runs.py --draft``), now kept by hand:
a new column or table is declared here, and tests/test_schemas.py checks every command's tables
against these on every trace."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyze.schema import CPU_SCHEMA, GPU_SCHEMA, MEMORY_SCHEMA


@dataclass(frozen=True)
class Declared:
    command: str
    view: str  # '' for a command's only table
    option: str  # "--by", "--table", "FROM" (a table `sql` queries) or '' (a command's only one)
    doc: str  # what a row is
    columns: dict[str, pl.DataType]


STR, F64, I64, I32, BOOL = pl.String(), pl.Float64(), pl.Int64(), pl.Int32(), pl.Boolean()

# The columns the SQL tables take from the trace's frames (times as the trace's nanoseconds).
_CPU_COLUMNS = ("rank", "op_id", "parent_id", "depth", "name", "pid", "tid", "ts_ns", "dur_ns")
_GPU_EXTRA = {
    "category": STR, "gemm_precision": STR, "threads_per_block": I64,
    "active_blocks_per_sm": I64, "theoretical_occupancy_pct": F64, "occupancy_limiter": STR,
    "achieved_occupancy_pct": F64, "dur_us": F64, "placement": STR, "op_chain": STR, "stack": STR,
    "module": STR, "module_stack": STR,
}  # fmt: skip
_SQL_GPU = {**GPU_SCHEMA, **_GPU_EXTRA}
_SQL_CPU = {c: CPU_SCHEMA[c] for c in _CPU_COLUMNS} | {"dur_us": F64, "iteration": I64}

# `iterations`' table, which `sql` queries too.
_ITERATION_COLUMNS = {
    "rank": I32, "iteration": I64, "kind": STR, "flag": STR, "counted": BOOL,
    "gpu_busy_us": F64, "gpu_span_us": F64, "gpu_idle_us": F64, "kernels": I64, "memcpy": I64,
    "memset": I64, "cpu_op_us": F64, "launch_us": F64, "cpu_span_us": F64, "wall_us": F64,
    "gpu_activity_us": F64, "gpu_kernel_us": F64, "gpu_memcpy_us": F64, "gpu_memset_us": F64,
    "own_busy_us": F64, "compute_us": F64, "communication_us": F64,
    "exposed_communication_us": F64, "exposed_copy_us": F64, "carried_in_us": F64,
    "carried_in_warmup_us": F64, "idle_queued_us": F64, "idle_sync_us": F64,
    "idle_data_loading_us": F64, "idle_host_us": F64, "idle_launch_us": F64,
    "idle_launch_first_call_us": F64, "idle_queued_dispatch_us": F64,
    "idle_queued_waiting_us": F64, "bound": STR,
}  # fmt: skip

DECLARED: tuple[Declared, ...] = (
    Declared("info", "traces", "--table",
        "One row per trace: device, versions, span, event counts, iterations, linking.", {
        "file": STR, "ranks": I64, "devices": pl.List(STR),
        "versions": pl.Struct({"cuda_runtime_version": STR, "cuda_driver_version": STR,
        "cupti_version": STR, "hip_runtime_version": STR, "hip_driver_version": STR,
        "roctracer_version": STR}), "span_ms": F64, "events": I64, "iterations": I64,
        "iteration_source": STR, "kernels": I64, "memcpy": I64, "memset": I64, "gpu_linked": I64,
        "gpu_unlinked": I64, "cpu_ops": I64, "runtime_calls": I64,
    }),
    Declared("info", "event_counts", "--table",
        "One row per trace and event category: how many events.", {
        "file": STR, "category": STR, "events": I64,
    }),
    Declared("kernels", "kernel", "--by",
        "One row per distinct kernel, memcpy or memset name, longest total time first.", {
        "name": STR, "category": STR, "kind": STR, "count_per_iter": F64, "us_per_iter": F64,
        "mean_us": F64, "min_us": F64, "max_us": F64, "share_of_gpu_activity_pct": F64,
        "theoretical_occupancy_pct": F64, "occupancy_limiter": STR, "achieved_occupancy_pct": F64,
        "launch_op": STR, "launch_ops": pl.List(pl.Struct({"op": STR, "count_per_iter": F64,
        "us_per_iter": F64})), "launch_api": STR, "stream": I64, "streams": I64,
        "gemm_precision": STR,
        "registers_per_thread": I64, "threads_per_block": I64, "shared_memory_bytes": I64,
        "count": I64, "total_us": F64,
    }),
    Declared("kernels", "op", "--by",
        "One row per launching CPU op: the GPU activity it launched.", {
        "launch_op": STR, "count_per_iter": F64, "us_per_iter": F64,
        "share_of_gpu_activity_pct": F64,
    }),
    Declared("summary", "figures", "--table",
        "One row per trace: the per-iteration figures and the bound verdict.", {
        "iterations": I64, "ranks": I64, "iteration_source": STR, "iteration_note": STR,
        "iterations_left_out": I64, "iteration_coverage_pct": F64, "kernels_per_iter": F64,
        "memcpy_per_iter": F64, "memset_per_iter": F64, "gpu_activity_us_per_iter": F64,
        "gpu_kernel_us_per_iter": F64, "gpu_memcpy_us_per_iter": F64,
        "gpu_memset_us_per_iter": F64, "gpu_busy_us_per_iter": F64, "gpu_span_us_per_iter": F64,
        "gpu_idle_us_per_iter": F64, "cpu_op_us_per_iter": F64, "launch_us_per_iter": F64,
        "cpu_span_us_per_iter": F64, "wall_us_per_iter": F64, "compute_us_per_iter": F64,
        "communication_us_per_iter": F64, "exposed_communication_us_per_iter": F64,
        "exposed_copy_us_per_iter": F64, "carried_in_us_per_iter": F64,
        "idle_us_by_cause": pl.Struct({"queued": F64, "sync": F64, "data_loading": F64,
        "host": F64, "launch": F64, "launch_first_call": F64}),
        "spread_per_iter": pl.Struct({"kernels_min": F64,
        "kernels_median": F64, "kernels_max": F64, "gpu_busy_us_min": F64,
        "gpu_busy_us_median": F64, "gpu_busy_us_max": F64, "gpu_idle_us_min": F64,
        "gpu_idle_us_median": F64, "gpu_idle_us_max": F64, "cpu_op_us_min": F64,
        "cpu_op_us_median": F64, "cpu_op_us_max": F64, "wall_us_min": F64, "wall_us_median": F64,
        "wall_us_max": F64}), "wall_source": STR, "gpu_busy_pct_of_wall": F64, "bound": STR,
        "bound_margin_pct": F64, "bound_note": STR, "transpose_ops_per_iter": F64,
        "graph_launches_per_iter": F64, "cudnn_cpu_us_per_iter": F64,
        "category_us": pl.Struct({"fused_attention": F64, "gemm": F64, "convolution": F64,
        "softmax": F64, "transpose": F64, "memcpy": F64, "memset": F64, "copy": F64, "fill": F64,
        "mask": F64, "elementwise": F64, "reduction": F64, "normalization": F64, "indexing": F64,
        "optimizer": F64, "communication": F64, "other": F64}),
        "category_count": pl.Struct({"fused_attention": F64, "gemm": F64, "convolution": F64,
        "softmax": F64, "transpose": F64, "memcpy": F64, "memset": F64, "copy": F64, "fill": F64,
        "mask": F64, "elementwise": F64, "reduction": F64, "normalization": F64, "indexing": F64,
        "optimizer": F64, "communication": F64, "other": F64}),
        "gpu_activities_outside_iterations_total": I64, "gpu_activities_without_launch_total": I64,
        "cpu_ops_outside_iterations_total": I64,
    }),
    Declared("summary", "launch_apis", "--table",
        "One row per launch API: launches per iteration.", {
        "launch_api": STR, "launches_per_iter": F64,
    }),
    Declared("summary", "audit_warnings", "--table",
        "One row per audit finding (check/finding) that moves the figures: its warning.", {
        "finding": STR, "warning": STR,
    }),
    Declared("iterations", "", "",
        "One row per iteration (and rank): its kind, whether it counts, its figures.",
        _ITERATION_COLUMNS),
    Declared("occupancy", "kernel", "--by",
        "One row per kernel and launch shape: theoretical occupancy and its limiter.", {
        "name": STR, "category": STR, "count_per_iter": F64, "us_per_iter": F64,
        "registers_per_thread": I64, "threads_per_block": I64, "shared_memory_bytes": I64,
        "theoretical_occupancy_pct": F64, "occupancy_limiter": STR, "achieved_occupancy_pct": F64,
    }),
    Declared("occupancy", "category", "--by",
        "One row per category: duration-weighted occupancy.", {
        "category": STR, "us_per_iter": F64, "theoretical_occupancy_pct": F64,
        "achieved_occupancy_pct": F64, "reported_coverage_pct": F64,
    }),
    Declared("cudnn", "", "", "One row per op that calls into cuDNN: its CPU self time.", {
        "name": STR, "calls_per_iter": F64, "self_us_per_iter": F64, "self_us_mean": F64,
        "share_of_cpu_op_pct": F64, "self_us_first_in_trace": F64, "self_us_steady_median": F64,
        "calls_total": I64, "launch_api": pl.List(STR),
    }),
    Declared("memcpy", "", "",
        "One row per memory copy or set kind and the CPU op chain that caused it.", {
        "chain": STR, "kind": STR, "name": STR, "count_per_iter": F64, "us_per_iter": F64,
        "bytes_per_call": F64, "bytes_per_iter": F64, "bandwidth_gbps": F64, "launch_op": STR,
        "count": I64, "total_us": F64, "advice": STR, "actionable": BOOL,
    }),
    Declared("check", "", "", "One row per expectation: the measured value and whether it held.", {
        "expectation": STR, "measured": F64, "held": BOOL,
    }),
    Declared("streams", "stream", "--by", "One row per GPU stream: its activity per iteration.", {
        "rank": I32, "device": I32, "stream": I64, "iterations": I64, "kernels_per_iter": F64,
        "memcpy_per_iter": F64, "memset_per_iter": F64, "activity_us_per_iter": F64,
        "kernel_us_per_iter": F64, "busy_us_per_iter": F64, "span_us_per_iter": F64,
        "idle_us_per_iter": F64,
    }),
    Declared("streams", "iteration", "--by", "One row per stream and iteration.", {
        "rank": I32, "iteration": I64, "device": I32, "stream": I64, "kernels": I64, "memcpy": I64,
        "memset": I64, "activity_us": F64, "kernel_us": F64, "busy_us": F64, "span_us": F64,
        "idle_us": F64,
    }),
    Declared("launches", "kernel", "--by",
        "One row per kernel name: launch call time, launch delay and queue.", {
        "name": STR, "category": STR, "count_in_iterations": I64, "count_per_iter": F64,
        "launch_cpu_us_median": F64, "launch_cpu_us_p90": F64, "launch_cpu_us_max": F64,
        "launch_delay_us_median": F64, "launch_delay_us_p90": F64, "launch_delay_us_max": F64,
        "queue_median": F64, "queue_max": I64, "gpu_us_median": F64, "short_kernels": I64,
        "short_kernels_per_iter": F64,
    }),
    Declared("launches", "category", "--by",
        "One row per category: launch call time, launch delay and queue.", {
        "category": STR, "count_in_iterations": I64, "count_per_iter": F64,
        "launch_cpu_us_median": F64,
        "launch_cpu_us_p90": F64, "launch_cpu_us_max": F64, "launch_delay_us_median": F64,
        "launch_delay_us_p90": F64, "launch_delay_us_max": F64, "queue_median": F64,
        "queue_max": I64, "gpu_us_median": F64, "short_kernels": I64,
        "short_kernels_per_iter": F64,
    }),
    Declared("launches", "outlier", "--by",
        "One row per launch delayed far beyond its name's median.", {
        "name": STR, "category": STR, "iteration": I64, "stream": I64, "launch_delay_us": F64,
        "name_median_delay_us": F64, "queue": I64, "launch_cpu_us": F64, "launch_op": STR,
    }),
    Declared("idle", "causes", "--table",
        "One row per idle cause: its time per iteration and share of the idle time.", {
        "cause": STR, "us_per_iter": F64, "gaps_per_iter": F64, "share_of_idle_pct": F64,
    }),
    Declared("idle", "by_stream", "--table",
        "One row per stream and cause: idle time before that stream's work.", {
        "rank": I32, "device": I32, "stream": I64, "cause": STR, "us_per_iter": F64,
    }),
    Declared("idle", "largest_gaps", "--table",
        "One row per gap among the longest: when, why, what ran on the CPU.", {
        "iteration": I64, "device": I32, "stream": I64, "gap_us": F64, "starts_at_us": F64,
        "cause": STR, "next_activity": STR, "launch_api": STR, "cpu_ops": STR,
    }),
    Declared("idle", "syncs", "--table",
        "One row per blocking call: CPU time blocked and GPU work waited for.", {
        "op": STR, "frame": STR, "count_per_iter": F64, "cpu_blocked_us_per_iter": F64,
        "gpu_waited_us_per_iter": F64,
    }),
    Declared("idle", "figures", "--table",
        "One row: the idle time, the step's wall time and the verdict.", {
        "gpu_idle_us_per_iter": F64, "wall_us_per_iter": F64, "bound": STR, "clock_note": STR,
        "iterations": I64, "gpu_activities_per_iter": F64,
    }),
    Declared("roofline", "ops", "--table",
        "One row per op and shape: FLOPs, bytes, achieved rate, % of the roofline.", {
        "op_name": STR, "shapes": STR, "dtype": STR, "causal": BOOL, "count_in_iterations": I64,
        "count_per_iter": F64, "flops": I64, "bytes": I64, "gpu_us": F64, "gpu_us_per_iter": F64,
        "share_of_gpu_activity_pct": F64, "tflops": F64, "tbps": F64, "intensity": F64,
        "peak_tflops": F64, "peak_tbps": F64, "pct_of_roofline": F64, "bound": STR,
        "peak_dtype": STR, "family": STR, "kernels_per_call": F64, "mean_kernel_us": F64,
        "theoretical_occupancy_pct": F64, "occupancy_limiter": STR, "grid_blocks": I64,
        "blocks_per_wave": I64, "waves": F64, "last_wave_fill_pct": F64,
        "wave_efficiency_pct": F64, "gemm_precision": STR, "gpu": STR, "verdict": STR,
        "gpu_sm": I64, "kernel_sm": I64, "kernel_align_elements": I64,
        "misaligned_dims": pl.List(pl.Struct({"dim": STR, "size": I64, "multiple": I64,
        "padded": I64})),
    }),
    Declared("roofline", "unmodelled", "--table",
        "One row per op with GPU time but no FLOP/byte formula.", {
        "op_name": STR, "reason": STR, "activities_per_iter": F64, "gpu_us_per_iter": F64,
        "share_of_gpu_activity_pct": F64,
    }),
    Declared("roofline", "waves", "--table",
        "One row per kernel and launch shape: waves and wave efficiency.", {
        "name": STR, "category": STR, "count_per_iter": F64, "us_per_iter": F64,
        "grid_blocks": I64, "threads_per_block": I64, "active_blocks_per_sm": I64,
        "blocks_per_wave": I64, "waves": F64, "last_wave_fill_pct": F64,
        "wave_efficiency_pct": F64, "wave_loss_pct": F64, "launch_op": STR,
    }),
    Declared("roofline", "devices", "--table", "One row per GPU model: the peaks used.", {
        "device_name": STR, "gpu": STR, "peak_bf16_tflops": F64, "peak_fp16_tflops": F64,
        "peak_fp8_tflops": F64, "peak_tf32_tflops": F64, "peak_fp32_tflops": F64,
        "peak_fp64_tflops": F64, "peak_fp64_tensor_tflops": F64, "peak_tbps": F64,
        "peak_source": STR,
    }),
    Declared("roofline", "figures", "--table",
        "One row: the GPU activity modelled and the notes.", {
        "gpu_activity_us_per_iter": F64, "modelled_pct": F64, "has_shapes": BOOL,
        "notes": pl.List(STR),
    }),
    Declared("explain", "parts", "--table",
        "One row per part of the change in GPU span (the parts add up).", {
        "part": STR, "kind": STR, "status": STR, "base_count_per_iter": F64,
        "new_count_per_iter": F64, "base_us_per_iter": F64, "new_us_per_iter": F64,
        "us_per_iter_delta": F64, "what": STR,
    }),
    Declared("explain", "cpu", "--table", "One row per CPU-side figure: base, new, change.", {
        "figure": STR, "base": F64, "new": F64, "delta": F64,
    }),
    Declared("explain", "figures", "--table",
        "One row: the change in GPU span, busy and wall time, the figures of both traces.", {
        "base": STR, "new": STR, "total_us_per_iter_delta": F64,
        "total_us_per_iter_delta_low": F64, "total_us_per_iter_delta_high": F64,
        "busy_us_per_iter_delta": F64, "wall_us_per_iter_delta": F64,
        "base_figures": pl.Struct({"gpu_span_us_per_iter": F64, "gpu_own_busy_us_per_iter": F64,
        "gpu_activity_us_per_iter": F64, "gpu_own_idle_us_per_iter": F64, "wall_us_per_iter": F64,
        "overlap_us_per_iter": F64}), "new_figures": pl.Struct({"gpu_span_us_per_iter": F64,
        "gpu_own_busy_us_per_iter": F64, "gpu_activity_us_per_iter": F64,
        "gpu_own_idle_us_per_iter": F64, "wall_us_per_iter": F64, "overlap_us_per_iter": F64}),
        "summary": STR, "base_peak_increase_bytes_per_iter": F64,
        "new_peak_increase_bytes_per_iter": F64, "peak_increase_bytes_per_iter_delta": F64,
    }),
    Declared("explain", "memory_blocks", "--table",
        "One row per block behind the change in peak memory.", {
        "op_name": STR, "block_bytes": I64, "base_per_iter": F64, "new_per_iter": F64,
        "bytes_per_iter_delta": F64, "change": STR,
    }),
    Declared("cold", "op", "--by",
        "One row per variant, side, cause and operator: first call against steady calls.", {
        "variant": STR, "rank": I32, "call": I64, "steady_call": I64, "steady_calls": I64,
        "side": STR, "cause": STR, "op_name": STR, "first_call_us": F64, "steady_us": F64,
        "excess_us": F64, "share_of_excess_pct": F64, "break_even_calls": I64,
        "break_even_note": STR, "cache_state": STR, "call_source": STR,
    }),
    Declared("cold", "cause", "--by", "One row per variant, side and cause.", {
        "variant": STR, "rank": I32, "call": I64, "steady_call": I64, "steady_calls": I64,
        "side": STR, "cause": STR, "first_call_us": F64, "steady_us": F64, "excess_us": F64,
        "share_of_excess_pct": F64, "break_even_calls": I64, "break_even_note": STR,
        "cache_state": STR, "call_source": STR,
    }),
    Declared("cold", "call", "--by", "One row per call of each variant.", {
        "variant": STR, "rank": I32, "call": I64, "name": STR, "shape_index": I64, "role": STR,
        "cpu_us": F64, "gpu_us": F64, "wall_us": F64,
    }),
    Declared("cold", "variant", "--by",
        "One row per variant: one-off cost, steady time, calls to break even.", {
        "variant": STR, "status": STR, "call_source": STR, "calls": I64, "first_call_in": STR,
        "cache_state": STR, "cache_state_source": STR, "cache_hits": STR, "first_call_us": F64,
        "steady_us": F64, "steady_calls": I64, "excess_us": F64, "cpu_excess_us": F64,
        "gpu_excess_us": F64, "timed_source": STR, "timed_first_call_us": F64,
        "timed_steady_us": F64, "timed_excess_us": F64, "timed_first_call_spread_pct": F64,
        "excess_vs_timed_pct": F64, "steady_vs_timed_pct": F64, "cudnn_planning_us": F64,
        "top_cause": STR, "advantage_us": F64, "one_off_difference_us": F64,
        "advantage_source": STR, "break_even_calls": I64, "break_even_note": STR, "note": STR,
    }),
    Declared("cold", "cache", "--by", "One row per cache event seen in each trace.", {
        "variant": STR, "rank": I32, "call": I64, "event": STR, "cache": STR, "outcome": STR,
        "count": I64, "us": F64, "meaning": STR,
    }),
    Declared("graphs", "", "", "One row per CUDA graph and position: the replayed activity.", {
        "rank": I32, "graph": I64, "position": I64, "kind": STR, "name": STR, "captured_op": STR,
        "captured_call": STR, "replays_per_iter": F64, "us_per_iter": F64, "mean_us": F64,
        "attribution_note": STR,
    }),
    Declared("compare", "", "", "One row per variant: figures, speed-ups and the bound verdict.", {
        "variant": STR, "status": STR, "gpu_busy_us_per_iter": F64, "speedup": F64,
        "speedup_low": F64, "speedup_high": F64, "wall_us_per_iter": F64, "median_ms": F64,
        "steady_median_ms": F64, "speedup_wall": F64, "speedup_wall_low": F64,
        "speedup_wall_high": F64, "speedup_wall_source": STR, "wall_source": STR, "bound": STR,
        "bound_margin_pct": F64, "bound_note": STR, "gpu_busy_pct_of_wall": F64,
        "gpu_activity_us_per_iter": F64, "gpu_kernel_us_per_iter": F64, "cpu_op_us_per_iter": F64,
        "kernels_per_iter": F64, "memcpy_per_iter": F64, "memset_per_iter": F64,
        "transpose_ops_per_iter": F64, "fused_kernel": STR, "theoretical_occupancy_pct": F64,
        "theoretical_occupancy_of_estimated_pct": F64, "estimated_occupancy_pct": F64,
        "achieved_occupancy_pct": F64, "reported_coverage_pct": F64, "cudnn_cpu_us_per_iter": F64,
        "peak_increase_bytes_per_iter": F64, "largest_block_bytes": I64, "largest_block_op": STR,
        "launch_api": pl.List(STR), "gemm_precision": pl.List(STR), "sdpa_backend": STR,
        "relative_error": F64, "description": STR, "steps_counted": I64,
        "gpu_busy_us_step_min": F64, "gpu_busy_us_step_max": F64, "wall_us_step_min": F64,
        "wall_us_step_max": F64, "gpu": STR, "same_gpu": BOOL, "same_workload": STR,
    }),
    Declared("diff", "figures", "--table", "One row per per-iteration figure: base, new, change.", {
        "figure": STR, "base": F64, "new": F64, "change": F64, "change_pct": F64,
    }),
    Declared("diff", "categories", "--table", "One row per category: GPU time in both traces.", {
        "category": STR, "base_us": F64, "new_us": F64, "change_us": F64,
    }),
    Declared("diff", "kernels", "--table", "One row per kernel added, removed or changed.", {
        "name": STR, "category": STR, "status": STR, "base_count_per_iter": F64,
        "new_count_per_iter": F64, "base_us_per_iter": F64, "new_us_per_iter": F64,
        "change_us": F64,
    }),
    Declared("memory", "iterations", "--table",
        "One row per iteration and device: allocated bytes, peaks, what outlives it.", {
        "iteration": I64, "device_label": STR, "start_allocated_bytes": I64,
        "peak_allocated_bytes": I64,
        "peak_increase_bytes": I64, "peak_reserved_bytes": I64, "end_allocated_bytes": I64,
        "allocations": I64, "allocated_bytes": I64, "outliving_blocks": I64,
        "outliving_bytes": I64, "frees_without_allocation": I64,
    }),
    Declared("memory", "peak_blocks", "--table", "One row per block live at an iteration's peak.", {
        "iteration": I64, "device_label": STR, "op_name": STR, "annotation": STR, "input_dims": STR,
        "allocated_in_iteration": I64, "lifetime_us": F64, "block_bytes": I64,
    }),
    Declared("memory", "top_ops", "--table", "One row per iteration, device and op: allocations.", {
        "iteration": I64, "device_label": STR, "op_name": STR, "allocations": I64,
        "allocated_bytes": I64, "largest_block_bytes": I64,
    }),
    Declared("memory", "leak_suspects", "--table",
        "One row per op whose blocks outlive every iteration.", {
        "device_label": STR, "op_name": STR, "block_bytes": I64, "blocks_per_iter": F64,
        "device_growth_bytes_per_iter": F64,
    }),
    Declared("memory", "figures", "--table", "One row: how many memory events the trace holds.", {
        "events": I64,
    }),
    Declared("ranks", "ranks", "--table",
        "One row per rank: step time, GPU, communication and idle figures.", {
        "rank": I32, "iterations": I64, "wall_us_per_iter": F64, "wall_pct_over_median": F64,
        "straggler": BOOL, "gpu_busy_us_per_iter": F64, "gpu_kernel_us_per_iter": F64,
        "communication_kernel_us_per_iter": F64, "exposed_communication_us_per_iter": F64,
        "overlap_pct_of_communication": F64, "collective_busbw_gbps_median": F64,
        "gpu_idle_us_per_iter": F64, "clock_offset_us": F64, "collectives_started_last": I64,
    }),
    Declared("ranks", "collectives", "--table",
        "One row per collective run on two or more ranks: start skew.", {
        "iteration": I64, "name": STR, "occurrence": I64, "ranks": I64, "start_spread_us": F64,
        "first_rank": I32, "last_rank": I32, "mean_us": F64,
    }),
    Declared("ranks", "figures", "--table",
        "One row: the median step time, stragglers and skew figures.", {
        "median_wall_us_per_iter": F64, "straggler_pct": F64, "stragglers": pl.List(I32),
        "clock_alignment": STR, "collectives_matched": I64, "median_start_spread_us": F64,
        "max_start_spread_us": F64, "notes": pl.List(STR),
    }),
    Declared("critical-path", "items", "--table",
        "One row per item on the path: its time and slack per iteration.", {
        "name": STR, "kind": STR, "us_per_iter": F64, "slack_us_per_iter": F64,
    }),
    Declared("critical-path", "by_kind", "--table",
        "One row per kind of work on the path: time per iteration.", {
        "kind": STR, "us_per_iter": F64,
    }),
    Declared("critical-path", "by_thread", "--table",
        "One row per CPU thread on the path: time per iteration, whether it runs autograd.", {
        "rank": I32, "thread": I64, "autograd_engine": BOOL, "us_per_iter": F64,
    }),
    Declared("critical-path", "iterations", "--table",
        "One row per iteration: its span and path length.", {
        "rank": I32, "iteration": I64, "span_us": F64, "length_us": F64,
    }),
    Declared("critical-path", "figures", "--table",
        "One row: span, path length, verdict and notes.", {
        "bound": STR, "bound_margin_pct": F64, "bound_note": STR, "span_us_per_iter": F64,
        "length_us_per_iter": F64, "notes": pl.List(STR),
    }),
    Declared("attention", "rows", "--table",
        "One row per attention call site and shape: calls, shapes, time, FLOPs, why not faster.", {
        "implementation": STR, "direction": STR, "call_site": STR, "calls_per_iter": F64,
        "batch": I64, "heads_q": I64, "heads_kv": I64, "seq_q": I64, "seq_kv": I64,
        "head_dim": I64, "gqa_ratio": I64, "dtype": STR, "causal": BOOL, "mask": STR,
        "dropout": F64, "kernels_per_call": F64, "gpu_us_per_call": F64, "cpu_us_per_call": F64,
        "flops_per_call": I64, "tflops": F64, "pct_of_peak": F64, "scores_bytes": I64,
        "why_not": STR, "refused_backends": pl.List(STR), "eligible_backends": pl.List(STR),
        "gpu_us_per_iter": F64, "share_of_gpu_activity_pct": F64, "peak_dtype": STR,
        "peak_tflops": F64, "flops_note": STR, "fused_estimate_us": F64,
        "fused_estimate_source": STR, "head_dim_v": I64, "tokens_q": I64, "blocks_q": I64,
        "blocks_kv": I64, "mask_copies": BOOL, "nested": BOOL, "region": STR,
        "kv_cache_write_us_per_call": F64, "source": STR, "shapes_from": STR,
        "kernels": pl.List(STR),
    }),
    Declared("attention", "host", "--table",
        "One row per host-side cost of an attention library (planning, wrappers).", {
        "kind": STR, "name": STR, "calls_per_iter": F64, "us_per_call": F64, "us_per_iter": F64,
        "plan_builds_per_iter": F64, "note": STR,
    }),
    Declared("attention", "figures", "--table",
        "One row: GPU activity and attention time per iteration, whether shapes were recorded.", {
        "gpu_activity_us_per_iter": F64, "attention_us_per_iter": F64, "has_shapes": BOOL,
    }),
    Declared("audit", "checks", "--table",
        "One row per finding of the trace's checks: severity, events, what it moves.", {
        "check": STR, "finding": STR, "severity": STR, "count": I64,
        "affected_us_per_iter": F64, "figures": pl.List(STR), "moved_pct": F64, "detail": STR,
    }),
    Declared("audit", "error_bars", "--table",
        "One row per figure the warnings and errors move: its ± per iteration, in its unit.", {
        "figure": STR, "error_bar_per_iter": F64,
    }),
    Declared("audit", "offsets", "--table",
        "One row per rank of a job: its clock minus the lowest rank's.", {
        "rank": I32, "offset_us": F64,
    }),
    Declared("audit", "figures", "--table",
        "One row: whether the trace has no warning and no error.", {"ok": BOOL}),
    Declared("comms", "call", "--by", "One row per collective call: kind, size, time, bandwidth.", {
        "collective": STR, "dtype": STR, "group_size": I64, "bytes": I64, "us": F64,
        "algbw_gbps": F64, "busbw_gbps": F64, "iteration": I64, "rank": I32, "name": STR,
        "on": STR, "size_bucket": STR, "bytes_source": STR, "group_size_source": STR,
        "ts_ns": I64, "clock_offset_us": F64,
    }),
    Declared("comms", "kind", "--by", "One row per collective kind, size bucket and side.", {
        "collective": STR, "size_bucket": STR, "on": STR, "count_per_iter": F64,
        "us_per_iter": F64, "bytes_median": F64, "busbw_gbps_median": F64, "link_peak_gbps": F64,
        "count": I64, "total_us": F64, "busbw_pct_of_peak": F64,
    }),
    Declared("stacks", "rows", "--table",
        "One row per user frame: GPU, kernel and CPU time per iteration.", {
        "frame": STR, "gpu_us_per_iter": F64, "cpu_us_per_iter": F64, "kernels_per_iter": F64,
        "share_of_gpu_activity_pct": F64,
    }),
    Declared("stacks", "copies", "--table",
        "One row per user line and copy chain: memory copies and sets.", {
        "frame": STR, "chain": STR, "count_per_iter": F64, "us_per_iter": F64,
        "bytes_per_iter": F64,
    }),
    Declared("cache info", "", "", "One row: the cache folder, its entries, size and limit.", {
        "location": STR, "entries": I64, "size_bytes": I64, "max_bytes": I64,
    }),
    Declared("cache clear", "", "", "One row: what was removed: entries and their size.", {
        "location": STR, "entries": I64, "size_bytes": I64, "max_bytes": I64,
    }),
    Declared("schema", "", "", "One row per column of a table a command writes.", {
        "table": STR, "selected_by": STR, "column": STR, "dtype": STR, "unit": STR,
    }),
    Declared("sql", "gpu", "FROM",
        "One row per GPU activity (kernel, memcpy, memset), classified, with its launch.",
        _SQL_GPU),
    Declared("sql", "kernels", "FROM", "One row per kernel: the gpu table's kernels.", _SQL_GPU),
    Declared("sql", "cpu_ops", "FROM", "One row per CPU operator (cpu_op event).", _SQL_CPU | {
        "input_dims": STR, "input_types": STR, "concrete_inputs": STR, "comm_name": STR,
        "comm_in_nelems": I64, "comm_out_nelems": I64, "comm_group_size": I64, "comm_dtype": STR,
    }),
    Declared("sql", "annotations", "FROM",
        "One row per record_function region or profiler step.", _SQL_CPU),
    Declared("sql", "runtime", "FROM", "One row per CUDA/HIP runtime or driver call.", _SQL_CPU | {
        "correlation": I64, "external_id": I64,
    }),
    Declared("sql", "iterations", "FROM",
        "One row per iteration: the iterations command's table.", _ITERATION_COLUMNS),
    Declared("sql", "modules", "FROM",
        "One row per nn.Module forward call (with_stack or with_modules).", {
        "rank": I32, "pid": I64, "tid": I64, "ts_ns": I64, "dur_ns": I64, "name": STR,
        "dur_us": F64,
    }),
    Declared("sql", "memory", "FROM",
        "One row per [memory] event: an allocation (bytes > 0) or a free.", dict(MEMORY_SCHEMA)),
)  # fmt: skip
