"""Everything a variant report shows, computed once (rendering is separate and pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count
from traceanalyze.analyses.compare import baseline_label, comparison
from traceanalyze.analyses.cudnn import cudnn_table
from traceanalyze.analyses.kernels import kernel_table
from traceanalyze.analyses.memcpy import findings as memory_findings
from traceanalyze.analyses.memcpy import memory_traffic
from traceanalyze.analyses.summary import BOUND_CPU, summary
from traceanalyze.load.variants import Variant, VariantSet
from traceanalyze.names import readable_names
from traceanalyze.trace import Trace

TOP_KERNELS = 8
ENVIRONMENT_KEYS = (
    "gpu", "compute_capability", "gfx_arch", "driver", "cuda", "hip", "cudnn", "torch", "triton",
    "python",
)  # fmt: skip
VERSION_KEYS = ("cuda_runtime_version", "cuda_driver_version", "hip_runtime_version")


@dataclass(frozen=True)
class VariantReport:
    label: str
    status: str
    reason: str | None
    summary: dict[str, Any] = field(default_factory=dict)
    categories: pl.DataFrame = field(default_factory=pl.DataFrame)
    top_kernels: pl.DataFrame = field(default_factory=pl.DataFrame)
    memory: pl.DataFrame = field(default_factory=pl.DataFrame)
    cudnn: pl.DataFrame = field(default_factory=pl.DataFrame)
    findings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    header: dict[str, Any]
    comparison: pl.DataFrame
    baseline: str | None
    variants: tuple[VariantReport, ...]
    category_us: pl.DataFrame  # variant, category, us (per iteration): for the chart


def build_report(variant_set: VariantSet, baseline: str | None = "naive") -> Report:
    table = comparison(variant_set.variants, baseline)
    reports = tuple(_variant_report(v) for v in variant_set.variants)
    long = [
        pl.DataFrame(
            {
                "variant": r.label,
                "category": r.categories["category"],
                "us": r.categories["us_per_iter"],
            }
        )
        for r in reports
        if r.categories.height
    ]
    category_us = (
        pl.concat(long)
        if long
        else pl.DataFrame(schema={"variant": pl.String, "category": pl.String, "us": pl.Float64})
    )
    return Report(
        header=header(variant_set),
        comparison=table,
        baseline=baseline_label(table, baseline),
        variants=reports,
        category_us=category_us,
    )


def header(variant_set: VariantSet) -> dict[str, Any]:
    """Device, software versions and capture configuration, from the manifest or the traces."""
    info: dict[str, Any] = {}
    if variant_set.manifests:
        manifest = variant_set.manifests[0]
        environment = manifest.get("environment", {})
        for key in ENVIRONMENT_KEYS:
            if environment.get(key):
                info[key] = environment[key]
        info["config"] = manifest.get("config", {})
        info["captured"] = manifest.get("created")
    traces = [v.trace for v in variant_set.loaded if v.trace is not None]
    if traces and "gpu" not in info:
        devices = pl.concat([t.devices for t in traces]).get_column("name").unique().sort()
        if devices.len():
            info["gpu"] = ", ".join(devices.to_list())
        # The first trace that records versions (traces[0] alone may have none), as text: the
        # header's table would write the integer 12040 as "12,040".
        versions = next((t.meta[0].versions for t in traces if t.meta[0].versions), {})
        for key in VERSION_KEYS:
            if key in versions:
                info[key] = str(versions[key])
    return info


def _variant_report(variant: Variant) -> VariantReport:
    trace = variant.trace
    if trace is None:
        return VariantReport(variant.label, variant.status, variant.reason)
    figures = summary(trace)
    kernels = kernel_table(trace)
    # One readable name per kernel for the whole section: the top-kernels table and the findings.
    kernels = kernels.with_columns(short_name=readable_names(kernels["name"]))
    return VariantReport(
        label=variant.label,
        status=variant.status,
        reason=variant.reason,
        summary=figures,
        categories=_categories(trace),
        # Ranked by time inside the iterations, as the rest of the section counts.
        top_kernels=kernels.sort(["us_per_iter", "name"], descending=[True, False]).head(
            TOP_KERNELS
        ),
        memory=memory_traffic(trace),
        cudnn=cudnn_table(trace),
        findings=tuple(_findings(trace, figures, kernels)),
    )


def _categories(trace: Trace) -> pl.DataFrame:
    gpu = in_iterations(activities(trace))
    n = iteration_count(trace)
    total = gpu["dur_ns"].sum() or 1
    return (
        gpu.group_by("category")
        .agg(
            count_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            share_pct=pl.col("dur_ns").sum() / total * 100,
        )
        .sort(["us_per_iter", "category"], descending=[True, False])
    )


def _findings(trace: Trace, figures: dict[str, Any], kernels: pl.DataFrame) -> list[str]:
    """Plain sentences on what stands out, most actionable first."""
    sentences = [*memory_findings(trace)]
    sentences += _occupancy_findings(kernels)
    sentences += _gemm_findings(kernels)
    planning = figures["cudnn_planning_us_per_iter"]
    cpu_us = figures["cpu_us_per_iter"]
    if planning > 0:
        share = planning / max(cpu_us, 1e-9) * 100
        sentences.append(
            f"cuDNN spends {planning:.1f} µs of CPU per iteration in its ops' self time "
            f"(execution plan build and lookup), {share:.0f}% of the CPU time in operators."
        )
    if figures["bound"] == BOUND_CPU:
        sentences.append(
            f"CPU-bound: {cpu_us:.1f} µs per iteration in CPU operators against "
            f"{figures['gpu_busy_us_per_iter']:.1f} µs of GPU work; a faster kernel will not "
            "help, fewer launches (fusion, CUDA graphs) will."
        )
    views = figures["transpose_ops_per_iter"]
    if views:
        sentences.append(
            f"{views:g} CPU-side transpose/permute {'op' if views == 1 else 'ops'} per iteration "
            "(metadata-only views: no kernel)."
        )
    if figures["unlinked_gpu_activities"]:
        sentences.append(
            f"{figures['unlinked_gpu_activities']} GPU activities were launched before the "
            "profiling window (no launch call in the trace) and are not counted per iteration."
        )
    return sentences


def _occupancy_findings(kernels: pl.DataFrame) -> list[str]:
    top = (
        kernels.filter(
            (pl.col("kind") == "kernel") & pl.col("theoretical_occupancy_pct").is_not_null()
        )
        .sort(["us_per_iter", "name"], descending=[True, False])
        .head(1)
    )
    if not top.height:
        return []
    row = top.row(0, named=True)
    reported = row["achieved_occupancy_pct"]
    said = (
        f"; the trace reports {reported:.0f}%"
        if reported is not None
        else ("; the trace reports none (0 or absent, as for driver-API launches)")
    )
    footprint = (
        f"{row['registers_per_thread']} registers/thread, {row['threads_per_block']} "
        f"threads/block, {row['shared_memory']:,} B shared memory"
    )
    return [
        f"The longest kernel, `{row['short_name']}` (from `{row['launch_op']}`), has "
        f"{row['theoretical_occupancy_pct']:.2f}% "
        f"theoretical occupancy, limited by {row['occupancy_limiter'].replace('_', ' ')} "
        f"({footprint}){said}."
    ]


def _gemm_findings(kernels: pl.DataFrame) -> list[str]:
    fp32 = kernels.filter(pl.col("gemm_precision") == "fp32-cuda-cores")
    if not fp32.height:
        return []
    share = float(fp32["share_pct"].sum())
    return [
        f"{fp32.height} GEMM kernel(s) run in fp32 on CUDA cores (no tensor cores), "
        f"{share:.0f}% of GPU time: the inputs were upcast to float32, as the SDPA math "
        "backend does."
    ]
