"""The markdown report (GitHub-flavoured) and its charts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from traceanalyze.analyses.diff import TraceDiff
from traceanalyze.analyses.report import Report, VariantReport
from traceanalyze.names import with_readable_names
from traceanalyze.render.charts import cpu_vs_gpu, gpu_time_by_category
from traceanalyze.render.table import markdown_record, markdown_table, to_csv, to_json

CHART_GPU = "gpu_time_by_category"
CHART_CPU_GPU = "cpu_vs_gpu"
CHART_TITLES = {
    CHART_GPU: "GPU time per variant by category",
    CHART_CPU_GPU: "CPU vs GPU time per iteration",
}

# Comparison columns shown to people, with their headings (JSON/CSV keep the keys).
_COMPARISON_HEADINGS = {
    "variant": "variant",
    "gpu_us_per_iter": "GPU µs/iter",
    "cpu_us_per_iter": "CPU µs/iter",
    "speedup": "speed-up (x)",
    "kernels_per_iter": "kernels/iter",
    "memcpy_per_iter": "memcpy/iter",
    "memset_per_iter": "memset/iter",
    "transpose_ops_per_iter": "CPU transposes/iter",
    "fused_kernel": "fused attention kernel",
    "theoretical_occupancy_pct": "theor. occupancy %",
    "achieved_occupancy_pct": "reported occupancy %",
    "cudnn_planning_us_per_iter": "cuDNN planning µs/iter",
    "launch_api": "launch API",
    "gemm_precision": "GEMM precision",
    "median_ms": "capture median ms",
}


def comparison_markdown(table: pl.DataFrame, *, full_names: bool = False) -> str:
    shown = table.filter(pl.col("status") == "ok")
    if full_names:
        shown = shown.with_columns(pl.col("fused_kernel_full").alias("fused_kernel"))
    columns = [c for c in _COMPARISON_HEADINGS if c in shown.columns]
    if shown["median_ms"].is_null().all():
        columns.remove("median_ms")
    # The speed-up stays a number (was pl.format("{}x"): "1.0x" next to "16.67x", left-aligned).
    shown = shown.select(columns).with_columns(pl.col("fused_kernel").fill_null("—"))
    return markdown_table(shown.rename({c: _COMPARISON_HEADINGS[c] for c in columns}))


def render_comparison(table: pl.DataFrame, fmt: str, *, full_names: bool = False) -> str:
    if fmt == "json":
        return to_json(table)
    if fmt == "csv":
        return to_csv(table)
    return comparison_markdown(table, full_names=full_names)


def chart_files(stem: str) -> dict[str, str]:
    """File names of the charts of a report called ``stem``.md, by chart: named after the
    report so that two reports in one folder keep their own charts."""
    return {chart: f"{stem}_{chart}.png" for chart in CHART_TITLES}


def charts(report: Report) -> dict[str, bytes]:
    """The report's charts as PNG bytes, by chart (see :func:`chart_files` for file names)."""
    if not report.category_us.height:
        return {}
    return {
        CHART_GPU: gpu_time_by_category(report.category_us),
        CHART_CPU_GPU: cpu_vs_gpu(report.comparison),
    }


def render_report(
    report: Report,
    *,
    command: str,
    version: str,
    charts: Mapping[str, str] | None = None,
    extra_sections: tuple[str, ...] = (),
    full_names: bool = False,
) -> str:
    """The whole report; ``charts`` maps each chart written beside it to its file name."""
    parts = [
        "# Attention profiling report\n",
        _header(report.header, command, version),
        "## Comparison\n",
        f"Per iteration (one profiler step), means over the profiled iterations. Speed-up is "
        f"GPU time relative to `{report.baseline}`.\n",
        comparison_markdown(report.comparison, full_names=full_names),
        _skipped(report),
    ]
    # Only the charts actually written: on standard output there are none to link to.
    if charts:
        parts.append("## Charts\n")
        parts += [f"![{CHART_TITLES[chart]}]({file})\n" for chart, file in charts.items()]
    parts += [_variant_section(v, full_names) for v in report.variants if v.status == "ok"]
    parts += list(extra_sections)
    parts.append(_glossary())
    return "\n".join(p for p in parts if p)


def _header(info: dict[str, Any], command: str, version: str) -> str:
    config = info.get("config") or {}
    # Through markdown_record, which escapes "|" in a value (the f-string rows did not).
    shown = {k: v for k, v in info.items() if k not in ("config", "captured")}
    table = markdown_record(shown) if shown else ""
    shape = ""
    if config:
        keys = ("batch", "heads", "seq", "head_dim", "dtype", "causal", "backward")
        shape = (
            "Capture configuration: "
            + ", ".join(f"{k} {config[k]}" for k in keys if k in config)
            + f"; profiler steps wait {config.get('wait')}, warmup {config.get('warmup')}, "
            f"active {config.get('active')}.\n"
        )
    captured = f"Traces captured {info['captured']}.\n" if info.get("captured") else ""
    produced = f"Produced by traceanalyze {version}: `{command}`.\n"
    return "\n".join(s for s in (table, shape, captured, produced) if s)


def _skipped(report: Report) -> str:
    rows = [v for v in report.variants if v.status != "ok"]
    if not rows:
        return ""
    lines = [f"- `{v.label}`: {v.status} ({v.reason or 'no reason recorded'})" for v in rows]
    return "Not compared:\n\n" + "\n".join(lines) + "\n"


def _variant_section(variant: VariantReport, full_names: bool) -> str:
    figures = variant.summary
    # Readable names were chosen among all of the variant's kernels, as its findings name them.
    kernels = variant.top_kernels
    if not full_names:
        kernels = kernels.with_columns(pl.col("short_name").alias("name"))
    kernels = kernels.select(
        "name", "category", "count_per_iter", "us_per_iter", "mean_us",
        "theoretical_occupancy_pct", "occupancy_limiter", "achieved_occupancy_pct", "launch_op",
    )  # fmt: skip
    counts = (
        f"{figures['kernels_per_iter']:g} kernels, {figures['memcpy_per_iter']:g} memcpy and "
        f"{figures['memset_per_iter']:g} memset per iteration"
    )
    times = (
        f"GPU {figures['gpu_kernel_us_per_iter']:.1f} µs in kernels, CPU "
        f"{figures['cpu_us_per_iter']:.1f} µs in operators ({figures['bound']})"
    )
    parts = [f"## `{variant.label}`\n", f"{counts}; {times}.\n"]
    if variant.findings:
        parts.append("**Findings**\n\n" + "\n".join(f"- {s}" for s in variant.findings) + "\n")
    parts += ["**Time by category**\n", markdown_table(variant.categories)]
    parts += ["**Top kernels**\n", markdown_table(kernels)]
    memory = variant.memory.filter(pl.col("count_per_iter") > 0)
    if memory.height:
        shown = memory.select("chain", "count_per_iter", "bytes_per_call", "total_us", "advice")
        parts += ["**Memory copies and sets**\n", markdown_table(shown)]
    if variant.cudnn.height:
        parts += ["**cuDNN CPU time**\n", markdown_table(variant.cudnn)]
    return "\n".join(parts)


def _glossary() -> str:
    return (
        "## How to read this\n\n"
        "- *GPU µs/iter*: sum of kernel durations per iteration (memcpy/memset excluded).\n"
        "- *CPU µs/iter*: time inside outermost PyTorch operators per iteration.\n"
        "- *theor. occupancy*: resident warps per SM allowed by the kernel's registers, shared "
        "memory and block size on this GPU, time-weighted over kernels; *reported occupancy* is "
        "Kineto's own estimate, time-weighted likewise (blank when it wrote 0 or none for half "
        "the kernel time or more).\n"
        "- *CPU transposes*: `aten::transpose`/`permute`/`t` ops, metadata-only views.\n"
        "- *cuDNN planning*: self time of the ops that call cuDNN (plan build and lookup).\n"
    )


def render_diff(result: TraceDiff, fmt: str, *, full_names: bool = False) -> str:
    sections = {
        "figures": result.figures,
        "categories": result.categories,
        "kernels": result.kernels,
    }
    if fmt == "json":
        return to_json({name: frame.to_dicts() for name, frame in sections.items()})
    if fmt == "csv":
        # One table for all three sections: a `section` column, then each section's columns
        # (empty where a row's section has no such column).
        return to_csv(
            pl.concat(
                [
                    frame.select(pl.lit(name).alias("section"), pl.all())
                    for name, frame in sections.items()
                ],
                how="diagonal_relaxed",
            )
        )
    kernels = result.kernels if full_names else with_readable_names(result.kernels)
    return "\n".join(
        [
            "## Per-iteration figures\n",
            markdown_table(result.figures),
            "## GPU time by category (µs per iteration)\n",
            markdown_table(result.categories),
            "## Kernels added, removed or changed\n",
            markdown_table(kernels) if kernels.height else "None.\n",
        ]
    )
