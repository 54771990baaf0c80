"""A variant's *Findings* in the report: plain sentences from the evidence its report holds
(:class:`~traceanalyze.analyses.report.contents.VariantReport`); the figures are computed in
analyses/, the sentences written here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from traceanalyze.analyses.memcpy import number_text, size_expr
from traceanalyze.analyses.report.contents import VariantReport
from traceanalyze.analyses.report.findings import (
    NO_OCCUPANCY_CATEGORIES,
    sentence_name,
    top_occupancy_kernel,
)
from traceanalyze.analyses.step.verdict import CPU_BOUND
from traceanalyze.render.table import prose_number
from traceanalyze.units import byte_size


def memory_findings(traffic: pl.DataFrame) -> list[str]:
    """One plain sentence per kind of actionable memory traffic inside the iterations, from
    the `memcpy` table."""
    table = traffic.filter((pl.col("count_per_iter") > 0) & pl.col("actionable"))
    sentences = table.select(
        pl.format(
            "{}: {} per iteration ({} µs){}; {}.",
            "chain",
            number_text(pl.col("count_per_iter")),
            number_text(pl.col("us_per_iter").round(1)),
            size_expr("bytes_per_call"),
            "advice",
        )
    )
    return sentences.to_series().to_list()


def variant_findings(variant: VariantReport) -> list[str]:
    """Plain sentences on what stands out in one variant, most actionable first; each only
    from evidence the variant's report holds."""
    figures, kernels = variant.summary, variant.kernels
    sentences = memory_findings(variant.memory)
    sentences += _occupancy_findings(kernels)
    sentences += _gemm_findings(kernels, sdpa_math=variant.sdpa_math)
    sentences += _cudnn_findings(variant.cudnn, variant.warm_up_calls, variant.library)
    sentences += _bound_findings(figures, variant.row)
    views = figures["transpose_ops_per_iter"]
    if views:
        sentences.append(
            f"{views:g} CPU-side transpose/permute {'op' if views == 1 else 'ops'} per iteration "
            "(metadata-only views: no kernel)."
        )
    if figures["iteration_note"]:
        sentences.append(f"Iterations: {figures['iteration_note']}.")
    outside_ops = figures["cpu_ops_outside_iterations_total"]
    if outside_ops:
        one = outside_ops == 1
        sentences.append(
            f"{outside_ops} CPU {'operator' if one else 'operators'} in the trace "
            f"{'falls' if one else 'fall'} outside every iteration and {'is' if one else 'are'} "
            "left out of the per-iteration CPU time."
        )
    outside = figures["gpu_activities_outside_iterations_total"]
    if outside:
        one = outside == 1
        sentences.append(
            f"{outside} GPU {'activity' if one else 'activities'} in the trace "
            f"{'was' if one else 'were'} launched outside every iteration and "
            f"{'is' if one else 'are'} left out of every per-iteration figure."
        )
    unlinked = figures["gpu_activities_without_launch_total"]
    if unlinked:
        one = unlinked == 1
        sentences.append(
            f"{unlinked} GPU {'activity' if one else 'activities'} in the trace "
            f"{'has' if one else 'have'} no launch call in it (launched before the trace "
            f"began, or the profiler dropped the call): no iteration holds "
            f"{'it' if one else 'them'}, and {'it is' if one else 'they are'} left out of "
            "every per-iteration figure."
        )
    return sentences


def _occupancy_findings(kernels: pl.DataFrame) -> list[str]:
    row = top_occupancy_kernel(kernels)
    if row is None:
        return []
    reported = row["achieved_occupancy_pct"]
    said = (
        f"; CUPTI's estimate, not a measurement: {reported:.0f}%"
        if reported is not None
        else "; the trace carries no CUPTI estimate (0 or absent, as for driver-API launches)"
    )
    limiter = row["occupancy_limiter"]
    limited = f", limited by {limiter.replace('_', ' ')}" if limiter else ""
    footprint = (
        f"{row['registers_per_thread']} registers/thread, {row['threads_per_block']} "
        f"threads/block, {byte_size(row['shared_memory_bytes'])} shared memory"
    )
    # A longer collective was passed over (its occupancy says nothing): say the set chosen from.
    longer = kernels.filter(
        pl.col("category").is_in(NO_OCCUPANCY_CATEGORIES)
        & (pl.col("us_per_iter") > row["us_per_iter"])
    ).height
    which = "The longest kernel outside the collectives" if longer else "The longest kernel"
    return [
        f"{which} per iteration, `{sentence_name(row['name'])}`{launched_by(row['launch_ops'])}, "
        f"has {row['theoretical_occupancy_pct']:.2f}% theoretical occupancy{limited} "
        f"({footprint}){said}."
    ]


def launched_by(launch_ops: list[dict[str, Any]]) -> str:
    """`` (from `op`)`` for a kernel one op launches; with several, each with its launches per
    iteration; nothing where no op in the trace launched it."""
    ops = [entry for entry in launch_ops if entry["op"] is not None]
    if not ops:
        return ""
    if len(ops) == 1 and len(launch_ops) == 1:
        return f" (from `{ops[0]['op']}`)"
    parts = [f"`{e['op']}` {prose_number(e['count_per_iter'])}" for e in ops]
    return f" (launches per iteration from {', '.join(parts)})"


def _gemm_findings(kernels: pl.DataFrame, *, sdpa_math: bool) -> list[str]:
    fp32 = kernels.filter(
        (pl.col("gemm_precision") == "fp32-cuda-cores") & (pl.col("us_per_iter") > 0)
    )
    if not fp32.height:
        return []
    share = float(fp32["share_of_gpu_activity_pct"].sum())
    cause = ": the SDPA math backend upcasts its inputs to float32" if sdpa_math else ""
    kernels_text = "1 GEMM kernel runs" if fp32.height == 1 else f"{fp32.height} GEMM kernels run"
    return [
        f"{kernels_text} in fp32 on CUDA cores (no tensor cores), "
        f"{share:.1f}% of the GPU activity time{cause}."
    ]


def _cudnn_findings(cudnn: pl.DataFrame, warm_up_calls: int | None, library: str) -> list[str]:
    rows = cudnn.filter(pl.col("self_us_per_iter") > 0)
    if not rows.height:
        return []
    spent = float(rows["self_us_per_iter"].sum())
    share = rows["share_of_cpu_op_pct"].sum()
    of_cpu = f" ({share:.1f}% of the CPU operator time)" if share is not None else ""
    if warm_up_calls:
        calls = "one warm-up call" if warm_up_calls == 1 else f"{warm_up_calls} warm-up calls"
        one_off = (
            f"{calls} ran before profiling (manifest), so the one-off "
            "plan build is not in this trace: this is the steady per-call cost (plan lookup, "
            "argument packing)"
        )
    else:
        one_off = (
            "the trace alone cannot say whether the one-off plan build happened before "
            "profiling started (`traceanalyze cold` separates first-call cost)"
        )
    return [
        f"The ops that call {library} spend {spent:.1f} µs of CPU self time per iteration"
        f"{of_cpu}; "
        f"{one_off}."
    ]


def _bound_findings(figures: Mapping[str, Any], row: dict[str, Any]) -> list[str]:
    if row.get("bound") != CPU_BOUND:
        return []
    advice = (
        " fewer launches (fusion, CUDA graphs) or less CPU work per launch will"
        if figures["launch_us_per_iter"] > 0
        else " less CPU work between GPU activities will"
    )
    return [
        f"{row['bound']}: {row['bound_note']}: {figures['gpu_busy_us_per_iter']:.1f} µs of GPU "
        f"busy time per iteration, {figures['cpu_op_us_per_iter']:.1f} µs in CPU operators; "
        f"a faster kernel will not help,{advice}."
    ]
