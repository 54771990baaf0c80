"""The markdown report (GitHub-flavoured) and its charts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from traceanalyze.analyses.distributed.ranks import RanksResult
from traceanalyze.analyses.report.contents import Report, VariantReport
from traceanalyze.analyses.roofline.model import TOP_OPS
from traceanalyze.analyses.step.definitions import DEFINITIONS
from traceanalyze.analyses.step.verdict import GPU_BOUND
from traceanalyze.analyses.variants.diff import TraceDiff
from traceanalyze.analyses.variants.sameness import DIFFERENT, SIMILAR, UNKNOWN
from traceanalyze.hardware.occupancy import OCCUPANCY_DEFINITIONS
from traceanalyze.names import readable_names, with_readable_names
from traceanalyze.render.between.critical_path import timeline_parts
from traceanalyze.render.charts import cpu_vs_gpu, gpu_time_by_category
from traceanalyze.render.cold import cold_section
from traceanalyze.render.formats import Forms
from traceanalyze.render.headings import heading
from traceanalyze.render.memory.tables import memory_section
from traceanalyze.render.perf import roofline_markdown
from traceanalyze.render.ranks import ranks_markdown
from traceanalyze.render.report.findings import findings_section, guesses_section
from traceanalyze.render.report.variant_findings import variant_findings
from traceanalyze.render.table import (
    markdown_record,
    markdown_table,
    prose_number,
)
from traceanalyze.tables import conform
from traceanalyze.trace import IterationSource

CHART_GPU = "gpu_time_by_category"
CHART_CPU_GPU = "cpu_vs_gpu"
CHART_TITLES = {
    CHART_GPU: "GPU time per variant by category",
    CHART_CPU_GPU: "CPU vs GPU time per iteration",
}

FUSED_KERNEL_WIDTH = 48
# The comparison in two tables for people (JSON/CSV carry every key in one row per variant):
# the headline, then the details.
HEADLINE_COLUMNS = (
    "variant", "gpu_busy_us_per_iter", "speedup", "speedup_wall", "bound", "kernels_per_iter",
    "memcpy_per_iter", "fused_kernel", "peak_increase_bytes_per_iter",
)  # fmt: skip
DETAIL_COLUMNS = (
    "variant", "median_ms", "speedup_low", "speedup_high", "speedup_wall_low",
    "speedup_wall_high", "speedup_wall_source", "gpu_busy_pct_of_wall", "bound_margin_pct",
    "wall_source",
    "wall_us_per_iter", "gpu_activity_us_per_iter", "gpu_kernel_us_per_iter",
    "cpu_op_us_per_iter", "memset_per_iter", "transpose_ops_per_iter",
    "theoretical_occupancy_pct", "theoretical_occupancy_of_estimated_pct",
    "estimated_occupancy_pct", "reported_coverage_pct",
    "cudnn_cpu_us_per_iter", "launch_api", "gemm_precision", "sdpa_backend", "relative_error",
    "largest_block_bytes", "largest_block_op",
)  # fmt: skip


def comparison_markdown(
    table: pl.DataFrame,
    *,
    full_names: bool = False,
    fold_details: bool = False,
    library: str = "cuDNN",
    gpus: bool = True,
) -> str:
    """The headline table, what is not comparable (another workload; with ``gpus``, another
    GPU), the CPU-bound variants, then the details table (folded in a report), headings
    derived from the keys; ``library`` names the DNN library (MIOpen on ROCm)."""
    shown = table.filter(pl.col("status") == "ok")
    if not full_names:
        # A narrow column: cut at 48 characters, never two kernels alike (JSON keeps them whole).
        shown = shown.with_columns(readable_names(shown["fused_kernel"], width=FUSED_KERNEL_WIDTH))
    shown = shown.with_columns(pl.col("fused_kernel").fill_null("—"))
    details: tuple[str, ...] = DETAIL_COLUMNS
    if shown["speedup_wall_source"].eq_missing(shown["wall_source"]).all():
        # One wall time for the verdict and the speed-up, as in any single capture: one column.
        details = tuple(c for c in DETAIL_COLUMNS if c != "speedup_wall_source")
    detail = _keyed_table(shown, details, library)
    if fold_details:
        detail = folded_block(
            f"Details: wall time, CPU time, occupancy, {library}, precision", detail
        )
    parts = (
        _keyed_table(shown, HEADLINE_COLUMNS),
        _sameness_lines(shown, gpus=gpus),
        _bound_lines(shown),
        detail,
    )
    return "\n".join(part for part in parts if part)


# What the comparison says of variants that are not the baseline's workload for sure, by
# compare's `same_workload` ({names}: the variants).
WORKLOAD_LINES = {
    DIFFERENT: "Not the baseline's workload: {names} (their outermost CPU operators per "
    "iteration differ from the baseline's: other ops, counts or shapes); no speed-up is given "
    "between different workloads.",
    SIMILAR: "{names}: most of the baseline's outermost CPU operators with the same shapes, "
    "some changed: the same workload with some code changed, judged from the operators (no "
    "manifest says so).",
    UNKNOWN: "Whether {names} ran the baseline's workload cannot be told (a trace without CPU "
    "operators): the speed-up assumes so.",
}


def _sameness_lines(table: pl.DataFrame, *, gpus: bool) -> str:
    """The variants that did not run the baseline's workload (no speed-up for them), those
    judged or not judged to, and (with ``gpus``) those of its workload on another GPU."""
    if "same_workload" not in table.columns:
        return ""
    lines = []
    for verdict, text in WORKLOAD_LINES.items():  # three verdicts
        rows = table.filter(pl.col("same_workload") == verdict)
        if rows.height:
            lines.append(text.format(names=", ".join(f"`{v}`" for v in rows["variant"])))
    other_gpu = table.filter(
        pl.col("same_gpu").eq(other=False) & pl.col("same_workload").ne_missing(DIFFERENT)
    )
    if gpus and other_gpu.height:
        where = ", ".join(f"`{v}` on {g}" for v, g in other_gpu.select("variant", "gpu").rows())
        lines.append(
            f"Not on the baseline's GPU: {where}; a speed-up compares the devices as well as "
            "the code."
        )
    return "\n\n".join(lines) + "\n" if lines else ""


def folded_block(summary: str, body: str) -> str:
    """``body`` folded under a one-line ``summary`` (an HTML <details> block; GitHub renders
    the markdown inside it)."""
    return f"<details>\n<summary>{summary}</summary>\n\n{body}\n</details>\n"


def _bound_lines(table: pl.DataFrame) -> str:
    """The variants that are not GPU-bound, each with its verdict's evidence."""
    others = table.filter(pl.col("bound").is_not_null() & (pl.col("bound") != GPU_BOUND))
    if not others.height:
        return ""
    rows = others.select("variant", "bound", "bound_note").rows()  # one row per variant
    lines = [f"- `{variant}`: {bound}: {note}" for variant, bound, note in rows]
    return (
        "Not GPU-bound (a faster kernel alone will not shorten these steps, or the trace cannot "
        "tell):\n\n" + "\n".join(lines) + "\n"
    )


def _keyed_table(frame: pl.DataFrame, columns: tuple[str, ...], library: str = "cuDNN") -> str:
    """``columns`` of ``frame`` with readable headings (the DNN library by its name on this
    platform); columns with no value at all left out."""
    kept = [c for c in columns if c in frame.columns and not frame[c].is_null().all()]
    headings = {c: _on_library(heading(c), library) for c in kept}
    return markdown_table(frame.select(kept).rename(headings))


def _on_library(text: str, library: str) -> str:
    """``text`` with cuDNN named as the library the traces call (MIOpen on ROCm)."""
    return text.replace("cuDNN", library)


def charts(report: Report) -> dict[str, bytes]:
    """The report's charts as PNG bytes, by chart (their files are named after the report's:
    report_<chart>.png); where the variants ran on different GPUs, each one's label names its
    GPU."""
    if not report.category_us.height:
        return {}
    named = pl.col("variant").replace(_gpu_labels(report))
    return {
        CHART_GPU: gpu_time_by_category(report.category_us.with_columns(named)),
        CHART_CPU_GPU: cpu_vs_gpu(report.comparison.with_columns(named)),
    }


def _mixed_gpus(report: Report) -> bool:
    return len(set(report.variant_gpus.values())) > 1


def _gpu_labels(report: Report) -> dict[str, str]:
    """Variant -> "variant (GPU)" where the set mixes GPU models; no change otherwise."""
    if not _mixed_gpus(report):
        return {}
    return {label: f"{label}\n({gpu})" for label, gpu in report.variant_gpus.items()}


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
        f"# {report.title}\n",
        f"Produced by traceanalyze {version}: `{command}`.\n",
        findings_section(report.findings, report.audit_lines, report.audit_command),
        guesses_section(report.guesses) if report.guesses is not None else "",
        "## Comparison\n",
        _comparison_intro(report),
        comparison_markdown(
            report.comparison,
            full_names=full_names,
            fold_details=True,
            library=report.dnn_library,
            gpus=not _mixed_gpus(report),  # the introduction names every variant's GPU
        ),
        _skipped(report),
    ]
    # Only the charts actually written: on standard output there are none to link to.
    if charts:
        parts.append("## Charts\n")
        parts += [f"![{CHART_TITLES[chart]}]({file})\n" for chart, file in charts.items()]
    parts += ["## Environment\n", _header(report.header)]
    parts += [
        _variant_section(v, full_names, report.dnn_library)
        for v in report.variants
        if v.status == "ok"
    ]
    parts += [cold_section(report.cold)] if report.cold is not None else []
    parts += [_ranks_section(label, result, full_names) for label, result in report.ranks]
    parts += list(extra_sections)
    parts.append(_on_library(_glossary(), report.dnn_library))
    return "\n".join(p for p in parts if p)


def _ranks_section(label: str, result: RanksResult, full_names: bool) -> str:
    return f"## Ranks of `{label}`\n\n" + ranks_markdown(result, full_names=full_names, level=3)


def _comparison_intro(report: Report) -> str:
    sources = {v.summary.get("iteration_source") for v in report.variants if v.summary}
    if sources == {IterationSource.PROFILER_STEP}:
        unit = "Per iteration (one profiler step), means over the profiled iterations."
    else:
        unit = "Per iteration (see each trace's section for how its iterations were found)."
    cold = (
        " These traces start cold: each one's first iteration holds its one-off work (plans, "
        "compiling, lazy loading), which these means include; *Cold start* below compares the "
        "first call with the steady ones. *speed-up wall*, the bound verdicts and *GPU busy % "
        "of wall* use each capture's steady median instead (its calls after the first, timed "
        "without the profiler), as the *wall source* column says."
        if report.cold is not None
        else ""
    )
    devices = (
        " These traces ran on different GPUs ("
        + "; ".join(f"`{label}`: {gpu}" for label, gpu in report.variant_gpus.items())
        + "): a speed-up compares the devices as well as the code."
        if _mixed_gpus(report)
        else ""
    )
    return (
        f"{unit}{devices} *speed-up* is GPU busy time relative to `{report.baseline}`; "
        "*speed-up wall* is wall time, from the capture's median times where the manifest has "
        "them (the *wall source* column names which), else the traces' iteration wall time. "
        f"Times are defined under *How to read this* below.{cold}\n"
    )


def _header(info: dict[str, Any]) -> str:
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
    return "\n".join(s for s in (table, shape, captured) if s) or "No device or version recorded.\n"


def _skipped(report: Report) -> str:
    rows = [v for v in report.variants if v.status != "ok"]
    if not rows:
        return ""
    lines = [f"- `{v.label}`: {v.status} ({v.reason or 'no reason recorded'})" for v in rows]
    return "Not compared:\n\n" + "\n".join(lines) + "\n"


def _variant_section(variant: VariantReport, full_names: bool, library: str) -> str:
    figures = variant.summary
    # Readable names were chosen among all of the variant's kernels, as its findings name them.
    kernels = variant.top_kernels
    if not full_names:
        kernels = kernels.with_columns(pl.col("short_name").alias("name"))
    kernels = kernels.select(
        "name", "category", "count_per_iter", "us_per_iter", "mean_us",
        "share_of_gpu_activity_pct", "theoretical_occupancy_pct", "occupancy_limiter",
        "achieved_occupancy_pct", "launch_op",
    )  # fmt: skip
    parts = []
    if variant.row.get("description"):
        parts.append(f"*{variant.row['description']}.*\n")
    parts += [_headline(figures, variant.row), *_why(variant)]
    said = variant_findings(variant)
    if said:
        parts.append("**Findings**\n\n" + "\n".join(f"- {s}" for s in said) + "\n")
    if variant.categories.height:
        total = figures["gpu_activity_us_per_iter"]
        parts += [
            f"**GPU activity by category** ({total:,.2f} µs per iteration in all)\n",
            _keyed_table(variant.categories, tuple(variant.categories.columns)),
            "**Top kernels** (per iteration)\n",
            _keyed_table(kernels, tuple(kernels.columns)),
        ]
    memory = variant.memory.filter(pl.col("count_per_iter") > 0)
    if memory.height:
        columns = ("chain", "count_per_iter", "us_per_iter", "bytes_per_call", "bandwidth_gbps",
                   "advice")  # fmt: skip
        parts += ["**Memory copies and sets** (per iteration)\n", _keyed_table(memory, columns)]
    cudnn = variant.cudnn.filter(pl.col("calls_per_iter") > 0)
    if cudnn.height:
        parts += [
            f"**CPU time in ops that call {library}**\n",
            _keyed_table(cudnn, tuple(cudnn.columns), library),
        ]
    parts += _roofline_part(variant, full_names)
    parts += memory_section(variant.allocations)
    parts += timeline_parts(variant.critical_path, variant.comms)
    summary = (
        f"GPU busy {figures['gpu_busy_us_per_iter']:,.1f} µs, "
        f"{_count(figures['kernels_per_iter'], 'kernel')} per iteration: findings and tables"
    )
    return f"## `{variant.label}`\n\n" + folded_block(summary, "\n".join(parts))


def _why(variant: VariantReport) -> list[str]:
    """One line: why the variant is faster or slower than the baseline (its largest parts)."""
    if variant.explained is None:
        return []
    return [f"**Against the baseline**: {variant.explained.sentence}\n"]


def _roofline_part(variant: VariantReport, full_names: bool) -> list[str]:
    """The variant's roofline (top ops), or one line saying why there is none."""
    result = variant.roofline
    if result is None:
        return []
    if not result.has_shapes:
        return [
            "**Roofline**: the trace has no recorded shapes (profiled without "
            "record_shapes=True), so no op's FLOPs or bytes are known.\n"
        ]
    return ["**Roofline**\n", roofline_markdown(result, top=TOP_OPS, full_names=full_names)]


def _headline(figures: Mapping[str, Any], row: dict[str, Any]) -> str:
    """The section's first line: counts, the accounting's times and the verdict."""
    counts = (
        f"{_count(figures['kernels_per_iter'], 'kernel')}, "
        f"{prose_number(figures['memcpy_per_iter'])} memcpy "
        f"and {prose_number(figures['memset_per_iter'])} memset per iteration"
    )
    times = (
        f"GPU busy {figures['gpu_busy_us_per_iter']:,.1f} µs (activity "
        f"{figures['gpu_activity_us_per_iter']:,.1f}, of which kernels "
        f"{figures['gpu_kernel_us_per_iter']:,.1f}), CPU operators "
        f"{figures['cpu_op_us_per_iter']:,.1f} µs, wall {figures['wall_us_per_iter']:,.1f} µs"
    )
    bound = row.get("bound") or figures["bound"]
    note = row.get("bound_note") or figures["bound_note"]
    verdict = f"{bound}: {note}" if bound else f"No bound verdict: {note}"
    return f"{counts}; {times}{_communication(figures)}{_carried(figures)}. {verdict}.\n"


def _communication(figures: Mapping[str, Any]) -> str:
    """Collectives' time per step and its exposed part, where the step has any."""
    total = figures.get("communication_us_per_iter") or 0.0
    if total <= 0:
        return ""
    return (
        f"; collectives {total:,.1f} µs, {figures['exposed_communication_us_per_iter']:,.1f} of "
        "them exposed (no compute under them; a collective's time includes waiting for its "
        "peers)"
    )


def _carried(figures: Mapping[str, Any]) -> str:
    """GPU work launched before the step that ran in its window, where there is any."""
    carried = figures.get("carried_in_us_per_iter") or 0.0
    if carried <= 0:
        return ""
    return f"; {carried:,.1f} µs of the GPU busy time carried in (launched before the step)"


def _count(value: float, noun: str) -> str:
    return f"{prose_number(value)} {noun}" + ("" if value == 1 else "s")


def _glossary() -> str:
    shown = {**DEFINITIONS, **OCCUPANCY_DEFINITIONS}
    shown.pop("achieved_occupancy_pct")  # JSON only: the tables show its new name
    lines = [f"- *{heading(key)}*: {text}." for key, text in shown.items()]
    extra = [
        "- *transpose ops*: CPU-side `aten::transpose`/`permute`/`t` ops, metadata-only views.",
        "- *cuDNN CPU µs*: self time (duration minus direct children) of the ops that call "
        "cuDNN; in steady state the per-call plan lookup, not the one-off plan build.",
        *_performance_glossary(),
    ]
    return "## How to read this\n\n" + "\n".join([*lines, *extra]) + "\n"


def _performance_glossary() -> list[str]:
    return [
        "- *Against the baseline*: the change in GPU span per iteration (busy + idle) split "
        "into parts that add up exactly: kernels by launching op and category, memory copies "
        "and sets by cause, stream overlap and idle gaps (`traceanalyze explain`).",
        "- *% of roofline*: the time an op would take on the roofline, the larger of its FLOPs "
        "over the peak FLOP/s and its bytes over the peak bandwidth, over its measured GPU time "
        "per call; FLOPs and bytes come from the recorded shapes (bytes: each input read once, "
        "each output written once, a lower bound); *bound* names the roof that sets that time.",
    ]


DIFF_SECTIONS = ("figures", "categories", "kernels")


def diff_record(result: TraceDiff) -> dict[str, Any]:
    """The JSON object: the warnings, then each section's rows."""
    return {
        "warnings": list(result.warnings),
        **{
            name: conform(getattr(result, name), f"diff.{name}").to_dicts()
            for name in DIFF_SECTIONS
        },
    }


def diff_markdown(result: TraceDiff, *, full_names: bool = False) -> str:
    kernels = result.kernels if full_names else with_readable_names(result.kernels)
    warnings = "".join(f"**Warning**: {w}.\n\n" for w in result.warnings)
    return warnings + "\n".join(
        [
            "## Per-iteration figures\n",
            _readable_table(result.figures.with_columns(_figure_headings(result.figures))),
            "## GPU time by category (µs per iteration)\n",
            _readable_table(result.categories),
            "## Kernels added, removed or changed\n",
            _readable_table(kernels) if kernels.height else "None.\n",
        ]
    )


def _readable_table(frame: pl.DataFrame) -> str:
    """A diff section with its columns headed as every other table's."""
    return markdown_table(frame.rename({c: heading(c) for c in frame.columns}))


def _figure_headings(figures: pl.DataFrame) -> pl.Expr:
    """The figures' names (their JSON keys) spelled as the compare table heads them."""
    names = figures["figure"].unique().to_list()
    return pl.col("figure").replace_strict({n: heading(n) for n in names}, return_dtype=pl.String)


# `compare`: JSON and the table the table; markdown the headline and details tables.
COMPARISON: Forms[pl.DataFrame] = Forms(markdown=comparison_markdown, command="compare")
# `diff`: JSON one object of sections; tables the sections (figures the default); markdown the
# warnings, then one heading per section.
DIFF: Forms[TraceDiff] = Forms(
    markdown=diff_markdown,
    json=lambda result, **_: diff_record(result),
    tables={name: name for name in DIFF_SECTIONS},
    command="diff",
)
